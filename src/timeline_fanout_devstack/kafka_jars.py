"""The Apache Kafka broker's jars: fetched by Maven from the POM beside this module, cached per POM.

The cache directory is keyed by the POM's hash, so changing a version fetches a fresh set and never
mixes two. Invariants:

- a cache directory is either absent or complete: jars are copied into a scratch directory, a
  manifest (name and size of every jar) is written last, and the directory is renamed into place;
  a reader trusts a directory only when its manifest exists and every listed jar has its size;
- one fetch at a time per cache root: fetchers hold an exclusive ``flock`` on the root's lock file
  (and so never share Maven's local repository mid-download), and re-check under the lock, so two
  processes starting at once download once and both see the complete set.

``python -m timeline_fanout_devstack.kafka_jars`` fetches (``.ci/bootstrap`` runs it before any
test starts) and prints the directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from xml.etree import ElementTree

POM = Path(__file__).parent / "kafka" / "pom.xml"
MANIFEST = "MANIFEST"
MAVEN_NS = "http://maven.apache.org/POM/4.0.0"


class KafkaJarsError(RuntimeError):
    pass


def kafka_version(pom: Path = POM) -> str:
    """The broker's version, as the POM's ``kafka.version`` property names it."""
    found = ElementTree.parse(pom).find("m:properties/m:kafka.version", {"m": MAVEN_NS})
    if found is None or not found.text:
        raise KafkaJarsError(f"{pom} names no kafka.version")
    return found.text


def cache_root() -> Path:
    """``$FANOUT_KAFKA_JARS`` or the user's cache directory: shared by every checkout and test
    run on the machine (the jars depend only on the POM)."""
    explicit = os.environ.get("FANOUT_KAFKA_JARS")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "timeline-fanout" / "kafka-jars"


def pom_key(pom: Path = POM) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()[:16]


def jar_dir(pom: Path = POM) -> Path:
    return cache_root() / pom_key(pom)


def is_complete(directory: Path) -> bool:
    manifest = directory / MANIFEST
    if not manifest.is_file():
        return False
    for line in manifest.read_text().splitlines():
        name, _, size = line.rpartition(" ")
        jar = directory / name
        if not jar.is_file() or jar.stat().st_size != int(size):
            return False
    return True


def cached_jars(pom: Path = POM) -> Path | None:
    """The complete jar directory for this POM, or None when it has not been fetched."""
    directory = jar_dir(pom)
    return directory if is_complete(directory) else None


def _mvn() -> str:
    found = shutil.which("mvn")
    if found is None:
        raise KafkaJarsError(
            "Maven is not installed (apt-get install -y maven): cannot fetch Kafka"
        )
    return found


def _copy_dependencies(pom: Path, into: Path) -> None:
    argv = [
        _mvn(),
        "-B",
        "-q",
        "-f",
        str(pom),
        # Maven's own repository beside the jars (Java's user.home ignores $HOME): an empty home
        # fetches everything, and only fetchers holding the lock ever write it.
        f"-Dmaven.repo.local={cache_root() / 'maven-repository'}",
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={into}",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise KafkaJarsError(f"mvn dependency:copy-dependencies failed:\n{tail}")


def fetch_jars(pom: Path = POM) -> Path:
    """The complete jar directory for this POM, fetching it first if needed (race-free)."""
    final = jar_dir(pom)
    if is_complete(final):
        return final
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{final.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(final):  # another process fetched while we waited
            return final
        scratch = Path(tempfile.mkdtemp(prefix=f"{final.name}.", suffix=".tmp", dir=root))
        try:
            _copy_dependencies(pom, scratch)
            jars = sorted(p for p in scratch.iterdir() if p.suffix == ".jar")
            if not any(p.name.startswith("kafka_2.13-") for p in jars):
                raise KafkaJarsError(f"Maven copied no kafka_2.13 jar into {scratch}")
            (scratch / MANIFEST).write_text("".join(f"{p.name} {p.stat().st_size}\n" for p in jars))
            if final.exists():  # an incomplete leftover (a fetch killed before this check)
                shutil.rmtree(final)
            scratch.rename(final)
        finally:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(scratch)
    return final


def classpath(directory: Path) -> str:
    return str(directory / "*")


if __name__ == "__main__":
    try:
        print(fetch_jars())
    except KafkaJarsError as exc:
        print(f"kafka jars: {exc}", file=sys.stderr)
        sys.exit(1)
