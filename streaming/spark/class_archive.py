"""A JVM class-data-sharing archive for Spark's driver, to cut its start-up.

Spark loads ~20,000 classes at start-up. On 2 cores that is most of the fixed cost
(measured with the archive `build_archive` makes: session 6.5 s -> 4.7 s, first job
2.4 s -> 1.5 s, JVM CPU 12.6 s -> 8.4 s). The archive is made once per JDK + pyspark install
by a short training run (`tidelake spark-archive`, also run by `make venv`) that exercises the
engine's code paths (decode, deduplication, Parquet writes, Delta reads) under
-XX:ArchiveClassesAtExit. Sessions use it when present; a stale or foreign archive is ignored
by the JVM, never fatal.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark

from tidelake.streaming.settings import host_settings
from tidelake.streaming.spark.jars import SPARK_FOLDER, JavaMissingError, jars_home, java_executable

TRAINING_MODULE = "tidelake.streaming.stream.archive_workload"
"""The training run, a module of the stream's code (what it exercises) run as a program."""


def archive_path() -> Path:
    """Where the archive for this JDK and this pyspark install lives."""
    cache = host_settings().cache_dir
    return cache / f"spark-classes-{_install_key()}.jsa"


def _install_key() -> str:
    """The JDK, pyspark and the jar cache: the JVM silently ignores an archive made with other
    jars (a rebuilt jar of tidelake's own JVM code included), so a new one gets a new key."""
    try:
        java = java_executable()
    except JavaMissingError:
        java = "java"
    jars = Path(pyspark.__file__).parent / "jars"
    facts = [pyspark.__version__, os.path.realpath(java), str(jars)]
    facts += [str(os.stat(os.path.realpath(java)).st_mtime_ns)] if os.path.exists(java) else []
    cache = jars_home() / SPARK_FOLDER
    for jar in sorted(cache.glob("*.jar")) if cache.is_dir() else []:
        stat = jar.stat()
        facts.append(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\0".join(facts).encode()).hexdigest()[:16]


def java_options() -> str:
    """JVM options that use the archive, or "" if none was built.

    CDS logging is off so that an archive from another JDK build is skipped without noise.
    """
    path = archive_path()
    return (
        f"-XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off" if path.exists() else ""
    )


def build_archive(timeout_s: float = 600) -> Path:
    """Run the training session and install its archive atomically; returns its path."""
    target = archive_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tidelake-cds-") as tmp:
        partial = Path(tmp) / "classes.jsa"
        training = subprocess.run(
            [sys.executable, "-m", TRAINING_MODULE, str(partial), tmp],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "TIDELAKE_SPARK_LOG_LEVEL": "ERROR"},
        )
        if training.returncode != 0:
            raise RuntimeError(f"training run failed:\n{training.stderr[-3000:]}")
        if not partial.exists():
            raise RuntimeError("the JVM wrote no class archive (does this JDK support AppCDS?)")
        staged = target.with_suffix(f".{os.getpid()}.tmp")
        shutil.copyfile(partial, staged)
        staged.replace(target)
    _prune(target.parent, keep=_KEEP_ARCHIVES)
    return target


_KEEP_ARCHIVES = 3


def _prune(cache: Path, keep: int) -> None:
    """Each install (virtualenv path) has its own archive; keep only the newest few."""
    archives = sorted(cache.glob("spark-classes-*.jsa"), key=lambda p: p.stat().st_mtime)
    for old in archives[:-keep]:
        old.unlink(missing_ok=True)
