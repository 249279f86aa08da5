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
from typing import Any

import pyspark

from tidelake.streaming.settings import host_settings
from tidelake.streaming.spark.jars import SPARK_FOLDER, JavaMissingError, jars_home, java_executable


def archive_path() -> Path:
    """Where the archive for this JDK and this pyspark install lives."""
    cache = host_settings().cache or Path.home() / ".cache" / "tidelake"
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
    """The training workload: what a stream does (decode, deduplicate, write data files, commit
    with delta-rs, read Delta with delta-spark), on Spark's rate source instead of Kafka."""
    from pyspark.sql import functions as F

    from tidelake.protos.call_pb2 import CallEvent
    from tidelake.streaming.calls.flow import CALL_EVENTS
    from tidelake.streaming.delta.write import MicroBatchWriter, ensure_flow_tables
    from tidelake.streaming.records.decode import decode_records
    from tidelake.streaming.records.dedup import drop_repeats_in_stream
    from tidelake.streaming.spark.session import build_spark_session

    spark = build_spark_session(
        conf={"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={archive} -Xlog:cds=off"},
        use_class_archive=False,
    )
    event = CallEvent(
        call_sid="CA" + "0" * 32,
        account_sid="AC" + "0" * 32,
        duration=1,
        call_state=CallEvent.completed,
        region=CallEvent.us1,
        event_time=1_700_000_000_000,
    ).SerializeToString()
    records = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 1000)
        .load()
        .select(
            F.lit(None).cast("binary").alias("key"),
            F.lit(event).alias("value"),
            F.lit("training").alias("topic"),
            F.lit(0).alias("partition"),
            F.col("value").alias("offset"),
            F.lit("2023-11-14 22:13:20").cast("timestamp").alias("timestamp"),
        )
    )
    table, quarantine, checkpoint = f"{work}/table", f"{work}/quarantine", f"{work}/checkpoint"
    decoded = decode_records(records, CALL_EVENTS)
    ensure_flow_tables(decoded, CALL_EVENTS, table, quarantine)
    writer = MicroBatchWriter(CALL_EVENTS, table, quarantine, checkpoint)

    def write(batch: Any, batch_id: int) -> None:
        writer(batch, batch_id)
        spark.read.format("delta").load(table).count()

    query = (
        drop_repeats_in_stream(decoded, CALL_EVENTS)
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .trigger(once=True)
        .start()
    )
    query.awaitTermination(300)
    spark.range(1000).selectExpr("sum(id)").collect()
    # The JVM writes the archive as it exits, which it does when our end of its stdin closes.
    # Wait for that here, so the caller finds a complete file.
    gateway = spark.sparkContext._gateway
    assert gateway is not None
    jvm = gateway.proc
    spark.stop()
    gateway.shutdown()
    jvm.stdin.close()
    jvm.wait(timeout=300)


if __name__ == "__main__":
    _train(sys.argv[1], sys.argv[2])
