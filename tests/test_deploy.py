"""docker-compose.yml and the Dockerfile, checked against the settings they wire up."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pymongo
import pytest
import yaml
from confluent_kafka.admin import AdminClient
from jsonschema import Draft7Validator
from prometheus_client import CollectorRegistry, start_http_server

from tests.compose_engines import (
    ENGINES,
    PROJECT,
    Engine,
    docker,
    docker_engine_host,
    podman,
    script,
    selected_engines,
)
from tests.pipeline_checks import (
    await_graph_applied,
    committed_lag,
    publish_graph,
    publish_posts,
    timelines_match,
    until,
)
from timeline_fanout import healthcheck
from timeline_fanout.api.settings import ApiSettings
from timeline_fanout.cli.settings import Settings
from timeline_fanout.memcache import MemcacheCluster
from timeline_fanout_devstack.kafka_jars import kafka_version

T = TypeVar("T")
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
    # The broker the tests run (the local stack's POM), not an older one.
    assert services["kafka"]["image"] == f"apache/kafka:{kafka_version()}"
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


@pytest.mark.parametrize("file", ["docker-compose.yml", "docker-compose.local.yml"])
def test_debians_docker_compose_reads_the_compose_files(file: str) -> None:
    """docker-compose 1.29 (Debian's; .ci/docker-engine installs it beside docker.io) validates
    each file against the Compose specification's schema, as Compose v2 reads it."""
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (.ci/docker-engine start installs it)")
    checked = subprocess.run(
        [binary, "-f", file, "config", "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("file", ["docker-compose.yml", "docker-compose.local.yml"])
def test_the_compose_files_keep_to_the_compose_specification(file: str) -> None:
    """The Compose specification's schema, which Compose v2 validates every file against:
    tests/deploy/compose-spec.json is schema/compose-spec.json of compose-spec/compose-spec
    (Apache-2.0) at commit 170098ba07d9f53c383a41bfd4c5166b0a4529a6 (June 2026). Plain YAML
    too: no tags that only some composes parse."""
    schema = json.loads((ROOT / "tests/deploy/compose-spec.json").read_text())
    text = (ROOT / file).read_text()
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in Draft7Validator(schema).iter_errors(yaml.safe_load(text))
    ]
    assert errors == []
    assert not re.search(r"(?m)^[^#]*:\s*!\w", text)  # !reset, !override


def test_podman_compose_reads_the_local_file() -> None:
    """podman-compose (what .ci/build-images installs into .venv) reads the local file alone."""
    binary = ROOT / ".venv/bin/podman-compose"
    if not binary.exists() or shutil.which("podman") is None:
        pytest.skip("podman-compose is not installed (.ci/build-images --tools-only installs it)")
    checked = subprocess.run(
        [binary, "-f", "docker-compose.local.yml", "config"],
        cwd=ROOT,
        env={**os.environ, "CONTAINERS_CONF": str(ROOT / "containers/podman/containers.conf")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
    assert "localhost/fanout-kafka:local" in checked.stdout


def local_compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.local.yml").read_text())
    return doc


ADDRESSES = {"FANOUT_KAFKA", "FANOUT_MEMCACHED", "FANOUT_EDGE_STORE"}


def test_the_local_file_runs_the_production_files_services_on_the_host() -> None:
    """docker-compose.local.yml is complete on its own (no override tags any compose lacks):
    the same services, commands, dependencies, policies and settings as docker-compose.yml,
    from local images on the host's network, one replica each on fixed loopback ports."""
    base, local = compose()["services"], local_compose()["services"]
    # And a service for one-off commands, started by `run` only (docs/operations.md).
    one_off = local.pop("fanout")
    assert one_off["profiles"] == ["jobs"] and "restart" not in one_off
    assert one_off["environment"] == local["topics"]["environment"]
    assert set(local) == set(base)
    assert set(local_compose()["volumes"]) == set(compose()["volumes"])
    for name, svc in local.items():
        prod = base[name]
        assert svc["image"].startswith("localhost/") and svc["pull_policy"] == "never", name
        assert svc["network_mode"] == "host" and "ports" not in svc and "deploy" not in svc
        assert "build" not in svc  # built by .ci/build-images
        assert name == "topics" or "test" in svc["healthcheck"]
        for key in ("init", "restart", "stop_grace_period"):
            assert svc.get(key) == prod.get(key), (name, key)
        conditions = {dep: spec["condition"] for dep, spec in svc.get("depends_on", {}).items()}
        assert conditions == {
            dep: spec["condition"] for dep, spec in prod.get("depends_on", {}).items()
        }, name
        assert [v.split(":")[1] for v in svc.get("volumes", [])] == [
            v.split(":")[1] for v in prod.get("volumes", [])
        ], name
    for name in ("topics", "graph-consumer", "fanout-consumer", "api"):
        env, prod_env = local[name]["environment"], base[name]["environment"]
        assert set(env) <= set(prod_env), name
        assert {k: v for k, v in env.items() if k not in ADDRESSES} == {
            k: prod_env[k] for k in env if k not in ADDRESSES
        }, name
        assert env["FANOUT_KAFKA"] == "127.0.0.1:19092"
    assert local["topics"]["command"] == base["topics"]["command"]
    for name in ("graph-consumer", "fanout-consumer"):  # --metrics-port 0: replicas side by side
        assert local[name]["command"] == [*base[name]["command"][:-1], "0"]
    serve = local["api"]["command"]
    assert serve[:3] == base["api"]["command"][:3]
    assert serve[3:] == ["--host", "127.0.0.1", "--port", "18080"]  # no token key needed


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


def test_dockerfile_runs_fanout_as_a_non_root_user_with_a_healthcheck() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    assert "ARG BASE_IMAGE=python:3.12-slim" in lines
    assert all(
        line.startswith("FROM ${BASE_IMAGE}")
        for line in lines
        if line.startswith("FROM ")
        if "scratch" not in line
    )
    assert any(line.startswith("USER ") and "root" not in line for line in lines)
    assert 'ENTRYPOINT ["fanout"]' in lines
    assert any(line.startswith("HEALTHCHECK ") for line in lines)
    # The healthcheck's module runs on the standard library only: it starts fast.
    source = (ROOT / "src/timeline_fanout/healthcheck.py").read_text()
    imports = {
        line.split()[1] for line in source.splitlines() if line.startswith(("import ", "from "))
    }
    assert imports <= {"__future__", "os", "sys", "urllib.error", "urllib.request", "pathlib"}


def test_the_image_installs_from_what_the_dockerfile_copies(tmp_path: Path) -> None:
    """Without an engine: build the wheel from exactly the files the COPY lines take (a
    package named in pyproject but not copied makes ``pip install .`` fail in the image)."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    for line in lines:
        if line.startswith("COPY ") and "--from=" not in line:
            *sources, dest = line.split()[1:]
            for pattern in sources:  # a wildcard may match nothing (./wheelhouse)
                for found in ROOT.glob(pattern):
                    source = found.name
                    target = tmp_path / dest / source if dest.endswith("/") else tmp_path / dest
                    if found.is_dir():
                        shutil.copytree(
                            found, target, ignore=shutil.ignore_patterns("results", "target")
                        )
                    else:
                        target.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy(found, target)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-2000:]


# --- The containers themselves (FANOUT_CONTAINERS=1) ------------------------------------------
#
# Builds every image from a cold cache with `.ci/build-images`, brings the local compose profile
# up and drives it from the host, on each engine FANOUT_CONTAINER_ENGINE names (podman, docker,
# or both comma-separated, the default; tests/compose_engines.py): podman with podman-compose,
# Docker with Debian's docker-compose 1.29. Gated: the cold build alone takes 1-2 minutes with
# podman and 4-5 with Docker on vfs, on 2 cores (two Debian bases from Debian's packages, the
# wheels, four images), beyond the CI budget.
# The services listen on fixed loopback ports (docker-compose.local.yml), so the tests share one
# stack per engine, one engine after the other, and must run in one process: `-n 0`.

LIVE = os.environ.get("FANOUT_CONTAINERS") == "1"
live = pytest.mark.skipif(
    not LIVE,
    reason="builds the images from a cold cache and drives the compose stack on podman and "
    "Docker (~4 and ~8 min): set FANOUT_CONTAINERS=1 and run with -n 0",
)
IMAGES = [
    "localhost/fanout-base-python:bookworm",
    "localhost/fanout-base-stack:bookworm",
    "localhost/timeline-fanout:latest",
    "localhost/fanout-kafka:local",
    "localhost/fanout-memcached:local",
    "localhost/fanout-ferretdb:local",
]
BACKING = ["kafka", "mongo", "memcached-a", "memcached-b"]
SERVICES = ["graph-consumer", "fanout-consumer", "api"]
LOCAL_PORTS = [19092, 19093, 11311, 11312, 27018, 18080]
KAFKA = "127.0.0.1:19092"
GRACE_S = 30.0  # stop_grace_period of the consumers in the compose files
FIGURES: dict[str, dict[str, float]] = {}  # per engine, printed once its stack is down


def container(service: str, index: int = 1) -> str:
    return f"{PROJECT}_{service}_{index}"


def await_healthy(engine: Engine, names: list[str], seconds: float) -> None:
    for name in names:
        until(lambda n=name: engine.healthy(n), seconds, f"{name} healthy")  # type: ignore[misc]


def up_in_order(engine: Engine) -> float:
    """The stack up; returns the seconds until every service is healthy. docker-compose honours
    the files' `depends_on` conditions itself. Podman 4.3 runs no healthcheck by itself (no
    systemd) and podman-compose ignores `service_healthy` before podman 4.6, so there the order
    is enforced here, each step with `--no-deps`."""
    start = time.monotonic()
    if engine.name == "docker":
        engine.compose("up", "-d", "--no-build", timeout=600)
        await_healthy(engine, [container(s) for s in [*BACKING, *SERVICES]], 240)
        assert engine.inspect(container("topics"), ".State.ExitCode") == "0"
        return time.monotonic() - start
    engine.compose("up", "-d", "--no-build", "--no-deps", *BACKING)
    await_healthy(engine, [container(s) for s in BACKING], 240)
    engine.compose("up", "-d", "--no-build", "--no-deps", "topics")
    assert engine("wait", container("topics"), timeout=120).stdout.strip() == "0"
    engine.compose("up", "-d", "--no-build", "--no-deps", *SERVICES)
    await_healthy(engine, [container(s) for s in SERVICES], 180)
    return time.monotonic() - start


def local_settings(home: Path) -> Settings:
    return Settings(
        home=home,
        kafka=KAFKA,
        memcached="127.0.0.1:11311,127.0.0.1:11312",
        edge_store="mongodb://127.0.0.1:27018/fanout",
        mongo_following="collection",
        topic_prefix="fanout",
        group="fanout",
    )


@pytest.fixture(scope="module", params=selected_engines() if LIVE else ENGINES)
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """The engine with its tools installed. Docker: the engine that answers, else one that
    `.ci/docker-engine start` starts here (and stops afterwards); skipped with the script's
    reason only where none can be started."""
    if request.param == "podman":
        yield podman()
        return
    started_here = docker_engine_host() is None
    begun = script(".ci/docker-engine", "start", env=dict(os.environ), timeout=900)
    if begun.returncode != 0:
        pytest.skip(f"no Docker engine could be started: {begun.stderr[-1500:]}")
    try:
        yield docker(begun.stdout.strip().removeprefix("DOCKER_HOST="))
    finally:
        if started_here:
            script(".ci/docker-engine", "stop", env=dict(os.environ), timeout=120)


@pytest.fixture(scope="module")
def stack(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """The local profile up on ``engine``, from images built from a cold cache (unless
    ``FANOUT_IMAGES_BUILT=1`` says the caller built them from the current sources)."""
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        pytest.fail("the container tests share one stack on fixed ports: run them with -n 0")
    for port in LOCAL_PORTS:
        with socket.socket() as probe:
            busy = probe.connect_ex(("127.0.0.1", port)) == 0
        assert not busy, f"port {port} of the local compose profile is taken"
    figures = FIGURES.setdefault(engine.name, {})
    engine.down()
    if os.environ.get("FANOUT_IMAGES_BUILT") != "1":
        for image in IMAGES:
            engine("rmi", "--force", image, check=False)
        start = time.monotonic()
        built = script(
            ".ci/build-images",
            "--engine",
            engine.name,
            "--rebuild-bases",
            env=engine.env,
            timeout=1800,
        )
        figures["cold build s"] = time.monotonic() - start
        assert built.returncode == 0, built.stderr[-3000:]
    figures["stack up s"] = up_in_order(engine)
    yield local_settings(tmp_path_factory.mktemp(f"host-{engine.name}"))
    engine.down()
    assert engine.project_containers() == []
    print(
        f"\ncontainer figures ({engine.name}): "
        + ", ".join(f"{k} {v:.1f}" for k, v in figures.items())
    )


@live
def test_the_cold_built_stack_comes_up_healthy(engine: Engine, stack: Settings) -> None:
    for image in IMAGES:
        assert engine.image_exists(image), image
    user = engine.inspect(container("fanout-consumer"), ".Config.User")
    assert user == "fanout"
    for service in [*BACKING, *SERVICES]:
        assert engine.healthy(container(service)), service
    # The product only: no sources, tests or pip in the project's image.
    listing = engine(
        "run",
        "--rm",
        "--network",
        "host",
        "--entrypoint",
        "sh",
        "localhost/timeline-fanout:latest",
        "-c",
        "ls / /opt/fanout/bin; ls /opt/fanout/lib/*/site-packages",
    ).stdout
    assert "tests" not in listing.split() and "bench" not in listing.split()
    assert "pip" not in listing.split() and "timeline_fanout" in listing.split()


@live
def test_events_published_on_the_host_reach_every_timeline(engine: Engine, stack: Settings) -> None:
    follows = publish_graph(stack, "reach", users=40, authors=6)
    await_graph_applied(stack)
    authors = [f"reacha{j}" for j in range(6)]
    start = time.monotonic()
    posts = publish_posts(stack, authors, 60, "reach")
    until(lambda: timelines_match(stack, follows, posts), 120, "every timeline complete")
    FIGURES[engine.name]["60 posts to 40 timelines s"] = time.monotonic() - start


def group_assignment(group: str) -> dict[str, set[tuple[str, int]]]:
    admin = AdminClient({"bootstrap.servers": KAFKA})
    description = admin.describe_consumer_groups([group])[group].result()
    return {
        m.member_id: {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
        for m in description.members
    }


@live
def test_three_scaled_fanout_consumers_share_the_partitions(
    engine: Engine, stack: Settings
) -> None:
    engine.compose(
        "up", "-d", "--no-build", "--no-deps", "--scale", "fanout-consumer=3", "fanout-consumer"
    )
    await_healthy(engine, [container("fanout-consumer", i) for i in (1, 2, 3)], 180)
    everything = {(t, p) for t in ("fanout.posts", "fanout.fanout-tasks") for p in range(12)}

    def shared() -> dict[str, set[tuple[str, int]]] | None:
        members = group_assignment("fanout.fanout")
        parts = list(members.values())
        if len(parts) != 3 or any(not p for p in parts) or set().union(*parts) != everything:
            return None
        return members

    members = until(shared, 120, "three members holding every partition")
    assert sum(len(p) for p in members.values()) == len(everything)  # disjoint
    # And they deliver: posts published now reach every timeline.
    follows = publish_graph(stack, "scale", users=30, authors=5)
    await_graph_applied(stack)
    authors = [f"scalea{j}" for j in range(5)]
    posts = publish_posts(stack, authors, 60, "scale")
    until(lambda: timelines_match(stack, follows, posts), 120, "every timeline complete")


@live
def test_a_consumer_killed_with_sigkill_is_restarted_and_nothing_is_lost(
    engine: Engine, stack: Settings
) -> None:
    name = container("fanout-consumer")
    follows = publish_graph(stack, "kill", users=30, authors=5)
    await_graph_applied(stack)
    authors = [f"killa{j}" for j in range(5)]
    posts = publish_posts(stack, authors, 200, "kill-before")
    started = engine.inspect(name, ".State.StartedAt")
    # The init process (init: true: catatonit under podman, docker-init under Docker); the
    # consumer is its child.
    init_pid = int(engine.inspect(name, ".State.Pid"))
    children = Path(f"/proc/{init_pid}/task/{init_pid}/children").read_text().split()
    killed_at = time.monotonic()
    os.kill(int(children[0]), signal.SIGKILL)
    until(
        lambda: (
            engine.inspect(name, ".State.Running") == "true"
            and engine.inspect(name, ".State.StartedAt") != started
        ),
        60,
        "the killed consumer's container running again",
    )
    FIGURES[engine.name]["kill -9 to running again s"] = time.monotonic() - killed_at
    await_healthy(engine, [name], 120)
    FIGURES[engine.name]["kill -9 to healthy s"] = time.monotonic() - killed_at
    assert int(engine.inspect(name, ".RestartCount")) >= 1
    posts |= publish_posts(stack, authors, 100, "kill-after")
    until(lambda: timelines_match(stack, follows, posts), 180, "every timeline complete")


@live
def test_replay_runs_as_a_one_off_container_and_rebuilds_lost_state(
    engine: Engine, stack: Settings
) -> None:
    follows = publish_graph(stack, "replay", users=20, authors=4)
    await_graph_applied(stack)
    authors = [f"replaya{j}" for j in range(4)]
    posts = publish_posts(stack, authors, 40, "replay")
    until(lambda: timelines_match(stack, follows, posts), 120, "every timeline complete")
    # Lose the edge store and the cache, then replay both topics in one-off containers.
    pymongo.MongoClient("mongodb://127.0.0.1:27018").drop_database("fanout")
    MemcacheCluster(stack.memcached_servers).flush_all()
    assert not timelines_match(stack, follows, posts)
    for which in ("graph", "fanout"):
        done = engine.compose(
            "--profile",
            "jobs",
            "run",
            "--rm",
            "-T",
            "--no-deps",
            "fanout",
            "replay",
            which,
            "--from-beginning",
            "--until-idle",
            "5",
            timeout=300,
        )
        assert "replayed" in done.stdout + done.stderr
    assert timelines_match(stack, follows, posts)
    one_offs = engine(
        "ps", "-a", "--filter", f"name={PROJECT}_fanout{engine.one_off_marker}", "-q"
    ).stdout.split()
    assert one_offs == []  # --rm: gone


@live
def test_sigterm_commits_and_exits_within_the_grace_period(engine: Engine, stack: Settings) -> None:
    follows = publish_graph(stack, "stop", users=20, authors=4)
    await_graph_applied(stack)
    authors = [f"stopa{j}" for j in range(4)]
    posts = publish_posts(stack, authors, 300, "stop")
    names = engine(
        "ps", "--filter", f"name={PROJECT}_fanout-consumer_", "--format", "{{.Names}}"
    ).stdout.split()
    assert names
    start = time.monotonic()  # while the posts are being delivered
    engine("stop", "--time", str(int(GRACE_S)), *names, timeout=GRACE_S + 60)
    FIGURES[engine.name]["SIGTERM to exited s"] = time.monotonic() - start
    assert time.monotonic() - start < GRACE_S
    for name in names:
        logs = engine("logs", name)
        assert engine.inspect(name, ".State.ExitCode") == "0", logs.stderr[-2000:]
        assert "signal 15: finishing the current batch" in logs.stdout + logs.stderr
    # What the stopped consumers applied was committed: started again, they finish the rest and
    # every timeline is complete, each post once.
    engine("start", *names)
    until(lambda: committed_lag(stack, "fanout", "fanout.posts") == 0, 120, "posts committed")
    until(lambda: timelines_match(stack, follows, posts), 120, "every timeline complete")


def test_the_healthcheck_passes_only_while_every_recorded_consumer_answers(tmp_path: Path) -> None:
    assert healthcheck.check(tmp_path) == [f"no consumer recorded a metrics port in {tmp_path}"]
    server, thread = start_http_server(0, addr="127.0.0.1", registry=CollectorRegistry())
    healthcheck.record_port(tmp_path, "graph", server.server_port)
    assert healthcheck.check(tmp_path) == []
    server.shutdown()
    server.server_close()
    thread.join(5)
    problems = healthcheck.check(tmp_path, timeout=1)
    assert len(problems) == 1 and f":{server.server_port}/metrics" in problems[0]
