"""A JVM class-data-sharing archive for Spark's driver, to cut its start-up.

Spark loads ~20,000 classes at start-up. On 2 cores that is most of the fixed cost
(measured with the archive `build_archive` makes: session 6.5 s -> 4.7 s, first job
2.4 s -> 1.5 s, JVM CPU 12.6 s -> 8.4 s). The archive is made once per JDK + pyspark install
by a short training run (`tidelake spark-archive`, also run by `make venv`) that exercises the
engine's code paths (Python data source reader and Arrow stream writer) under
-XX:ArchiveClassesAtExit. Sessions
use it when present; a stale or foreign archive is ignored by the JVM, never fatal.
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


def archive_path() -> Path:
    """Where the archive for this JDK and this pyspark install lives."""
    cache = Path(os.environ.get("TIDELAKE_CACHE") or Path.home() / ".cache" / "tidelake")
    return cache / f"spark-classes-{_install_key()}.jsa"


def _install_key() -> str:
    java = shutil.which("java", path=_java_path()) or "java"
    jars = Path(pyspark.__file__).parent / "jars"
    facts = [pyspark.__version__, os.path.realpath(java), str(jars)]
    facts += [str(os.stat(os.path.realpath(java)).st_mtime_ns)] if os.path.exists(java) else []
    return hashlib.sha256("\0".join(facts).encode()).hexdigest()[:16]


def _java_path() -> str:
    home = os.environ.get("JAVA_HOME")
    return os.pathsep.join(filter(None, [f"{home}/bin" if home else "", os.environ.get("PATH")]))


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
            [sys.executable, "-m", __name__, str(partial), tmp],
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


def _train(archive: str, work: str) -> None:
    """The training workload: what a stream does, on an in-process source."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from tidelake.streaming.session import build_spark_session

    class CounterReader(DataSourceStreamReader):
        def initialOffset(self) -> dict:
            return {"n": 0}

        def latestOffset(self, start: dict, limit: object) -> dict:
            return {"n": min(start["n"] + 1000, 3000)}

        def partitions(self, start: dict, end: dict) -> list[InputPartition]:
            return [InputPartition((start["n"], end["n"]))]

        def read(self, partition: InputPartition):
            import pyarrow as pa

            lo, hi = partition.value
            yield pa.record_batch(
                {
                    "id": pa.array(range(lo, hi), pa.int64()),
                    "date": pa.array([0] * (hi - lo), pa.date32()),
                }
            )

    class CounterSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "tidelake-cds-counter"

        def schema(self) -> str:
            return "id long, date date"

        def streamReader(self, schema: object) -> DataSourceStreamReader:
            return CounterReader()

    spark = build_spark_session(
        conf={"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={archive} -Xlog:cds=off"},
        use_class_archive=False,
    )
    spark.dataSource.register(CounterSource)
    query = (
        spark.readStream.format("tidelake-cds-counter")
        .load()
        .writeStream.format("tidelake-delta")
        .option("path", f"{work}/table")
        .option("partitionBy", "date")
        .option("checkpointLocation", f"{work}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    spark.range(1000).selectExpr("sum(id)").collect()
    # The JVM writes the archive as it exits, which it does when our end of its stdin closes.
    # Wait for that here, so the caller finds a complete file.
    jvm = spark.sparkContext._gateway.proc
    spark.stop()
    spark.sparkContext._gateway.shutdown()
    jvm.stdin.close()
    jvm.wait(timeout=300)


if __name__ == "__main__":
    _train(sys.argv[1], sys.argv[2])
