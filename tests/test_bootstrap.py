"""``.ci/make-venv`` on a Debian machine whose python3 lacks ensurepip: it installs python3-venv
with apt and creates the venv. Run against stub ``python3``, ``apt-get``, ``sudo`` and ``id``
that behave as Debian's do, in a copy of the script's directory layout."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

PYTHON3 = """#!/bin/sh
# A Debian system python3: `-m venv` fails until python3-venv is installed.
if [ "$1 $2" = "-m venv" ]; then
  if [ -f "$STUBS/python3-venv-installed" ]; then
    mkdir -p "$3/bin" && printf '#!/bin/sh\\n' > "$3/bin/python" && chmod +x "$3/bin/python"
    exit 0
  fi
  mkdir -p "$3"
  echo "The virtual environment was not created successfully because ensurepip is not" >&2
  echo "available.  On Debian/Ubuntu systems, you need to install the python3-venv" >&2
  exit 1
fi
exit 2
"""
APT_GET = """#!/bin/sh
echo "apt-get $*" >> "$STUBS/calls"
case "$*" in *install*python3-venv*) touch "$STUBS/python3-venv-installed" ;; esac
"""
SUDO = """#!/bin/sh
echo "sudo $1" >> "$STUBS/calls"
exec "$@"
"""
ID = """#!/bin/sh
echo 1000
"""


def run_make_venv(tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    checkout = tmp_path / "checkout"
    (checkout / ".ci").mkdir(parents=True)
    for script in ("make-venv", "apt-install"):
        shutil.copy(REPO / ".ci" / script, checkout / ".ci" / script)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name, body in {"python3": PYTHON3, "apt-get": APT_GET, "sudo": SUDO, "id": ID}.items():
        (stubs / name).write_text(body)
        (stubs / name).chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "STUBS": str(stubs), "HOME": str(tmp_path)}
    done = subprocess.run(
        ["bash", str(checkout / ".ci" / "make-venv")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, stubs


def test_a_missing_ensurepip_is_installed_with_apt(tmp_path: Path) -> None:
    done, stubs = run_make_venv(tmp_path)
    assert done.returncode == 0, done.stderr
    assert os.access(tmp_path / "checkout" / ".venv" / "bin" / "python", os.X_OK)
    calls = (stubs / "calls").read_text().splitlines()
    assert "apt-get -o DPkg::Lock::Timeout=900 install -y -qq python3-venv" in calls
    assert "sudo apt-get" in calls  # not root: through sudo, as memcached is installed


def test_an_existing_venv_is_left_alone(tmp_path: Path) -> None:
    venv_bin = tmp_path / "checkout" / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").write_text("#!/bin/sh\n")
    (venv_bin / "python").chmod(0o755)
    done, stubs = run_make_venv(tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (stubs / "calls").exists()


def test_cargo_env_finds_rustups_toolchain_under_a_fresh_home(tmp_path: Path) -> None:
    """Under a HOME without ~/.rustup (a CI runner, a fresh user) rustup's proxy on PATH picks
    no toolchain; ``.ci/cargo-env`` points it at the one beside the proxy, so pip can build the
    native core."""
    env = {k: v for k, v in os.environ.items() if k not in ("RUSTUP_HOME", "CARGO_HOME")}
    env["HOME"] = str(tmp_path)
    bare = subprocess.run(["bash", "-c", "cargo --version"], env=env, capture_output=True)
    if shutil.which("cargo", path=env["PATH"]) is None or bare.returncode == 0:
        pytest.skip("no rustup proxy on PATH, or one that needs no help under a fresh HOME")
    found = subprocess.run(
        ["bash", "-c", "set -euo pipefail; source .ci/cargo-env; cargo --version"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.startswith("cargo ")
