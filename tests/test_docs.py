"""Pages rendered by mkdocs hooks from the code and the recorded runs.

The configuration reference (docs/configuration.md) is rendered from the settings models by
docs/hooks/settings_reference.py: every setting appears with its environment variable, default
and description, and a setting without a description cannot be documented. The performance
page's latest results are rendered from bench/results/*.json by docs/hooks/bench_results.py:
every result has its section, and a file that is not one is a note, never a failed build."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from timeline_fanout.api.settings import ApiSettings
from timeline_fanout.cli.settings import Settings

ROOT = Path(__file__).parents[1]


def _hook(name: str = "settings_reference") -> ModuleType:
    path = ROOT / "docs" / "hooks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("model", "prefix"), [(Settings, "FANOUT_"), (ApiSettings, "FANOUT_API_")])
def test_every_setting_is_in_the_configuration_reference(
    model: type[BaseSettings], prefix: str
) -> None:
    table = _hook().render_table(model)
    for name, info in model.model_fields.items():
        row = next(r for r in table.splitlines() if r.startswith(f"| `{prefix}{name.upper()}` |"))
        assert info.description and info.description.split()[0] in row, name


def test_the_configuration_page_renders_both_models() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    rendered = _hook().on_page_markdown(page)
    assert "settings-table" not in rendered
    for name in [*Settings.model_fields, *ApiSettings.model_fields]:
        assert f"_{name.upper()}` |" in rendered, name


def test_a_setting_without_a_description_fails_the_docs_build() -> None:
    class Undocumented(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="X_")
        documented: int = Field(1, description="has one")
        silent: int = 2

    hook = _hook()
    with pytest.raises(hook.UndocumentedSetting, match="silent"):
        hook.render_table(Undocumented)


def _result(**fields: object) -> str:
    doc = {
        "benchmark": "example",
        "quick": False,
        "machine": {"cpus": 2, "cpu": "Some CPU", "memory_gib": 23.5},
        "when": "2026-11-28T12:43:31Z",
        "peak_rss_mib": 50.0,
        "rows": [{"n": 1}],
    }
    return json.dumps(doc | fields)


def test_the_performance_page_has_a_section_for_every_result() -> None:
    hook = _hook("bench_results")
    rendered = hook.on_page_markdown((ROOT / "docs" / "performance.md").read_text())
    assert "bench-results" not in rendered
    names = [path.stem for path in (ROOT / "bench" / "results").glob("*.json")]
    for name in names:
        assert f"\n### {name}\n" in rendered, name
    measured = [name for name in names if name not in hook.COMPUTED]
    assert rendered.count("\nMeasured on ") == len(measured)
    assert "no figures are shown" not in rendered


def test_a_result_renders_its_provenance_and_a_table_per_set_of_keys(tmp_path: Path) -> None:
    rows = [
        {"size": 1, "per_s": 2.5, "ok": True, "key": "a|b", "none": None, "p": {"p50_ms": 0.1}},
        {"size": 2, "per_s": 3.0, "ok": False, "key": "c", "none": None, "p": {"p50_ms": 0.2}},
        {"ratio": "per_s / baseline", "value": 1.2, "met": True},
    ]
    (tmp_path / "example.json").write_text(_result(rows=rows, commit="abc1234", dirty=True))
    section = _hook("bench_results").render_results(tmp_path)
    assert section.splitlines()[:3] == [
        "### example",
        "",
        "Measured on Some CPU, 2 CPUs, 23.5 GiB, 2026-11-28, commit abc1234 with uncommitted"
        " changes.",
    ]
    assert "| size | per\\_s | ok | key | none | p.p50\\_ms |" in section
    assert "| 1 | 2.5 | yes | a\\|b |  | 0.1 |" in section
    assert "| 2 | 3.0 | no | c |  | 0.2 |" in section
    assert "| ratio | value | met |\n| --- | --- | --- |\n| per\\_s / baseline | 1.2 | yes |" in (
        section
    )


def test_a_file_that_is_not_a_result_is_a_note_not_a_failed_build(tmp_path: Path) -> None:
    (tmp_path / "a-truncated.json").write_text('{"benchmark": ')
    (tmp_path / "b-list.json").write_text("[]")
    (tmp_path / "c-no-rows.json").write_text(_result(rows=[]))
    (tmp_path / "d-bad-date.json").write_text(_result(when="yesterday"))
    (tmp_path / "e-no-commit.json").write_text(_result())
    (tmp_path / "notes.md").write_text("not a result")
    (tmp_path / "brokers").mkdir()
    (tmp_path / "brokers" / "fanout-rate.json").write_text(_result())
    rendered = _hook("bench_results").render_results(tmp_path)
    headings = [line for line in rendered.splitlines() if line.startswith("### ")]
    assert headings == [
        f"### {n}" for n in ["a-truncated", "b-list", "c-no-rows", "d-bad-date", "e-no-commit"]
    ]
    notes = [line for line in rendered.splitlines() if "no figures are shown for it" in line]
    assert len(notes) == 4
    assert "commit not recorded." in rendered
