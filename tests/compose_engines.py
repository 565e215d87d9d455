"""The two container engines the local compose profile runs on, behind one driver: podman with
podman-compose, and Docker with Debian's docker-compose 1.29. Their command lines agree on
almost everything (run, inspect, logs, stop, start, ps); they differ in how a container's health
is read, how a compose project labels its containers, what a one-off container is called, and
what is left to remove after ``down``."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[1]
PROJECT = "timeline-fanout"
COMPOSE_FILE = "docker-compose.local.yml"
VOLUMES = ("kafka-data", "mongo-data")
ENGINES = ("podman", "docker")


def selected_engines() -> list[str]:
    """``FANOUT_CONTAINER_ENGINE``: ``podman``, ``docker``, or both comma-separated (the
    default)."""
    names = [
        n.strip() for n in os.environ.get("FANOUT_CONTAINER_ENGINE", ",".join(ENGINES)).split(",")
    ]
    unknown = set(names) - set(ENGINES)
    if unknown or not names:
        raise ValueError(f"FANOUT_CONTAINER_ENGINE: {sorted(unknown)} (podman, docker)")
    return names


def script(*argv: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """One of the project's .ci scripts, from the checkout's root."""
    return subprocess.run(
        ["bash", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@dataclass
class Engine:
    """One engine's command line, its compose and their differences."""

    name: str
    env: dict[str, str]
    compose_binary: str
    project_label: str
    one_off_marker: str  # in the name of a container of `compose run`

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [self.name, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check:
            assert done.returncode == 0, f"{self.name} {' '.join(args)}: {done.stderr[-2000:]}"
        return done

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        argv = [self.compose_binary, "-p", PROJECT, "-f", COMPOSE_FILE, *args]
        done = subprocess.run(
            argv,
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert done.returncode == 0, f"{' '.join(argv)}: {done.stdout[-1500:]}{done.stderr[-1500:]}"
        return done

    def inspect(self, name: str, template: str) -> str:
        return self("inspect", "--format", "{{" + template + "}}", name).stdout.strip()

    def image_exists(self, image: str) -> bool:
        return self("image", "inspect", image, check=False).returncode == 0

    def healthy(self, name: str) -> bool:
        if self.name == "podman":
            # Without systemd podman runs no healthcheck by itself: run one now.
            return self("healthcheck", "run", name, check=False, timeout=60).returncode == 0
        # dockerd runs each container's healthcheck on its interval: read the verdict.
        done = self("inspect", "--format", "{{.State.Health.Status}}", name, check=False)
        return done.returncode == 0 and done.stdout.strip() == "healthy"

    def project_containers(self) -> list[str]:
        filter_ = f"label={self.project_label}={PROJECT}"
        return self("ps", "-a", "-q", "--filter", filter_).stdout.split()

    def down(self) -> None:
        """`down` knows the replicas its file declares, not those `--scale` added (podman-compose):
        remove the project's containers by label, then its pod and volumes."""
        self.compose("down", "-v", "-t", "5")
        leftover = self.project_containers()
        if leftover:
            self("rm", "--force", "--volumes", *leftover)
        if self.name == "podman":
            self("pod", "rm", "--force", f"pod_{PROJECT}", check=False)
        for volume in VOLUMES:
            self("volume", "rm", "--force", f"{PROJECT}_{volume}", check=False)


def podman() -> Engine:
    """Podman with the project's containers.conf, and the podman-compose that
    ``.ci/build-images --tools-only`` installs (with podman) into the checkout's .venv."""
    env = {**os.environ, "CONTAINERS_CONF": str(ROOT / "containers/podman/containers.conf")}
    tools = script(".ci/build-images", "--tools-only", env=env, timeout=900)
    assert tools.returncode == 0, tools.stderr[-3000:]
    return Engine(
        name="podman",
        env=env,
        compose_binary=str(ROOT / ".venv/bin/podman-compose"),
        project_label="io.podman.compose.project",
        one_off_marker="_tmp",
    )


def docker_engine_host() -> str | None:
    """The DOCKER_HOST of an engine that answers, or None."""
    done = script(".ci/docker-engine", "host", env=dict(os.environ), timeout=60)
    return done.stdout.strip().removeprefix("DOCKER_HOST=") if done.returncode == 0 else None


def docker(host: str) -> Engine:
    """Docker at ``host`` (``.ci/docker-engine start`` installs docker.io and Debian's
    docker-compose with it) and mmdebstrap for the bases (``.ci/build-images --tools-only``)."""
    env = {**os.environ, "DOCKER_HOST": host}
    tools = script(".ci/build-images", "--engine", "docker", "--tools-only", env=env, timeout=900)
    assert tools.returncode == 0, tools.stderr[-3000:]
    binary = shutil.which("docker-compose")
    assert binary is not None, "docker-compose is not installed (.ci/docker-engine start does)"
    return Engine(
        name="docker",
        env=env,
        compose_binary=binary,
        project_label="com.docker.compose.project",
        one_off_marker="_run_",
    )
