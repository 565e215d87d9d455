"""The configuration reference (docs/configuration.md) is rendered from the settings models by
the mkdocs hook docs/hooks/settings_reference.py: every setting appears with its environment
variable, default and description, and a setting without a description cannot be documented."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from timeline_fanout.api.settings import ApiSettings
from timeline_fanout.cli.settings import Settings

ROOT = Path(__file__).parents[1]


def _hook() -> ModuleType:
    path = ROOT / "docs" / "hooks" / "settings_reference.py"
    spec = importlib.util.spec_from_file_location("settings_reference", path)
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
