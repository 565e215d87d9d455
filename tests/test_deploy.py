"""docker-compose.yml and the Dockerfile, checked against the settings they wire up."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from timeline_fanout.api.settings import ApiSettings
from timeline_fanout.cli.settings import Settings

ROOT = Path(__file__).parents[1]
SETTINGS = {f"FANOUT_{name.upper()}" for name in Settings.model_fields}
API_SETTINGS = {f"FANOUT_API_{name.upper()}" for name in ApiSettings.model_fields}


def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return doc


def test_services_and_images() -> None:
    services = compose()["services"]
    assert set(services) == {
        "kafka",
        "mongo",
        "memcached-a",
        "memcached-b",
        "topics",
        "graph-consumer",
        "fanout-consumer",
        "api",
    }
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert "controller" in services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]  # KRaft
    listeners = services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert "kafka:19092" in listeners and "localhost:9092" in listeners  # network and host
    assert services["mongo"]["image"].startswith("mongo:")
    assert any(v.endswith(":/data/db") for v in services["mongo"]["volumes"])
    assert set(compose()["volumes"]) >= {"mongo-data"}
    for name in ("memcached-a", "memcached-b"):
        assert services[name]["image"].startswith("memcached:")
        assert "healthcheck" in services[name]
    assert services["topics"]["command"] == ["topics", "create"]
    assert services["topics"]["restart"] == "no"


def test_consumers_are_scalable_healthy_and_wait_for_their_dependencies() -> None:
    doc = compose()
    text = (ROOT / "docker-compose.yml").read_text()
    assert "container_name" not in text  # fixed names would forbid --scale
    for name, which in (("graph-consumer", "graph"), ("fanout-consumer", "fanout")):
        svc = doc["services"][name]
        assert svc["init"] is True
        assert svc["deploy"]["replicas"] >= 1
        assert "healthcheck" in svc
        assert svc["command"][-4:] == ["consume", which, "--metrics-port", "9100"]
        conditions = {dep: spec["condition"] for dep, spec in svc["depends_on"].items()}
        assert conditions["topics"] == "service_completed_successfully"
        for dep in ("mongo", "memcached-a", "memcached-b"):
            assert conditions[dep] == "service_healthy"
    assert doc["services"]["topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"


def test_environment_is_wired_to_real_settings_and_services() -> None:
    doc = compose()
    services = doc["services"]
    for name in ("topics", "graph-consumer", "fanout-consumer"):
        env = services[name]["environment"]
        assert set(env) <= SETTINGS, set(env) - SETTINGS
        kafka_host = env["FANOUT_KAFKA"].split(":")[0]
        assert kafka_host in services
        memcached_hosts = {s.split(":")[0] for s in env["FANOUT_MEMCACHED"].split(",")}
        assert memcached_hosts == {"memcached-a", "memcached-b"}
        assert env["FANOUT_EDGE_STORE"].startswith("mongodb://mongo:")
        Settings(**{k.removeprefix("FANOUT_").lower(): v for k, v in env.items()})  # valid


def test_the_api_is_replicated_ready_checked_and_never_open() -> None:
    svc = compose()["services"]["api"]
    assert svc["deploy"]["replicas"] == 2 and svc["init"] is True
    assert "/readyz" in " ".join(svc["healthcheck"]["test"])
    command = svc["command"]
    assert command[command.index("serve") :][:3] == ["serve", "--host", "0.0.0.0"]
    env = svc["environment"]
    assert set(env) <= SETTINGS | API_SETTINGS, set(env) - SETTINGS - API_SETTINGS
    # Listening beyond loopback, so a key must come from the operator's environment.
    assert env["FANOUT_API_JWT_SECRET"] == "${FANOUT_API_JWT_SECRET:-}"
    assert {k: v for k, v in env.items() if k in SETTINGS} == compose()["x-fanout-env"]
    assert ApiSettings(jwt_secret="", jwt_public_key="").auth_configured is False
    conditions = {dep: spec["condition"] for dep, spec in svc["depends_on"].items()}
    assert conditions["topics"] == "service_completed_successfully"
    assert all(conditions[d] == "service_healthy" for d in ("mongo", "memcached-a", "memcached-b"))


def test_dockerfile_runs_fanout_as_a_non_root_user() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    base = next(line for line in lines if line.startswith("FROM "))
    assert base.endswith("-slim")
    assert any(line.startswith("USER ") and "root" not in line for line in lines)
    assert 'ENTRYPOINT ["fanout"]' in lines


def test_the_image_installs_from_what_the_dockerfile_copies(tmp_path: Path) -> None:
    """No Docker engine here: build the wheel from exactly the files the COPY lines take (a
    package named in pyproject but not copied makes ``pip install .`` fail in the image)."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    for line in lines:
        if line.startswith("COPY "):
            *sources, dest = line.split()[1:]
            for source in sources:
                target = tmp_path / dest / source if dest.endswith("/") else tmp_path / dest
                if (ROOT / source).is_dir():
                    shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("results"))
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(ROOT / source, target)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-2000:]
