"""The SparkSession the engine runs in: the jar cache on its classpath, Delta configured."""

from __future__ import annotations

import ctypes.util
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from typing import Any, Protocol

from pyspark.sql import SparkSession

from tidelake.streaming.errors import ConfigError
from tidelake.streaming.settings import host_settings
from tidelake.streaming.spark import class_archive
from tidelake.streaming.spark.interrupts import host_interrupts
from tidelake.streaming.spark.jars import spark_jars
from tidelake.streaming.storage.s3_settings import s3_settings

log = logging.getLogger(__name__)

DEFAULT_SPARK_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # the driver JVM's heap; spark_session_conf makes it fixed (-Xms = -Xmx, touched at start)
    "spark.driver.memory": "1g",
    # one state partition per core: each micro-batch commits every state partition's RocksDB
    # store, a fixed cost per partition (a restarted query keeps its checkpoint's number)
    "spark.sql.shuffle.partitions": "2",
    # how long an idle stream waits before asking Kafka for new offsets again; a stream that
    # keeps finding data never waits. An idle stream took 42% of a core at Spark's 10 ms, 14% at
    # 100 ms, 5.6% at 500 ms and 4.1% at 1 s (bench/engine_latency.py); 500 ms adds at most that
    # to the first event after a quiet spell
    "spark.sql.streaming.pollingDelay": "500ms",
    # an idle stream should not plan empty batches
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    # deduplication state on local disk, not the JVM heap: a backlog's keys can be many
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # one memory budget for every RocksDB store of the JVM (block cache, memtables, index and
    # filter blocks): unbounded, the index and filters grow with the keys, which a stream holds
    # for 2x its lateness (hours); bounded, with jemalloc as the allocator (jvm_allocator_env),
    # the JVM's RSS levels off once the cache is full (bench/soak.py, docs/benchmarks.md)
    "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
    "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": "500",
    # what the checkpoint keeps to recover from (a restart needs the last batch): Spark's 100
    # batches keep the RocksDB snapshots whose SST files compaction has since replaced, 3.7x
    # the live state's files; 20 keep 2.0x (bench/soak.py, docs/benchmarks.md, issue 38)
    "spark.sql.streaming.minBatchesToRetain": "20",
    # counting rows makes every state write read its key first (measured when it was turned
    # off: 200k deduplicated rows took 4.5 s with it on); the count is only a metric
    "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
    # Delta through delta-spark (jars from the jar cache, see spark/jars.py)
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # file: through Hadoop without a forked chmod/readlink per file (no native libhadoop here):
    # ~118 processes a micro-batch before (jvm/spark-extensions NioRawLocalFileSystem)
    "spark.hadoop.fs.file.impl": "dev.tidelake.hadoop.NioLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "dev.tidelake.hadoop.NioLocalFs",
    # commits atomic across processes on the local filesystem (Delta's own LocalLogStore is
    # atomic only within one JVM): see jvm/spark-extensions AtomicLocalLogStore
    "spark.delta.logStore.file.impl": "dev.tidelake.delta.AtomicLocalLogStore",
    # a snapshot's state is rebuilt with this many tasks (default 50, for clusters)
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # data files that delta-rs commits (delta/files.py): Delta's timestamp encoding, no _SUCCESS
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
}


def spark_session_conf(
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    app_name: str = "tidelake",
    *,
    use_class_archive: bool = True,
) -> dict[str, str]:
    """Every setting of the engine's session, for SparkSession.builder or a Dagster resource.

    spark.jars lists the jar cache's Spark-side jars (Spark's Kafka source, Delta); user
    jars given in conf are kept after them. Local masters bind to loopback only. Workers run
    this interpreter (the virtualenv), not whatever python3 is on PATH. With
    use_class_archive the driver JVM maps the class archive of `tidelake spark-archive` if
    one was built (see spark/class_archive.py); it changes nothing else.
    """
    settings = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.pyspark.python": sys.executable,
        **DEFAULT_SPARK_CONF,
        **s3_settings().hadoop_conf(),  # s3:// is Hadoop's s3a
    }
    if master.startswith("local"):
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    conf = dict(conf or {})
    jars = [str(j) for j in spark_jars()] + [j for j in conf.pop("spark.jars", "").split(",") if j]
    settings["spark.jars"] = ",".join(jars)
    # spark-submit reads spark.jars through Hadoop's filesystem before they are on the
    # classpath, so the class that fs.file.impl names must be on the JVM's own classpath, and
    # with it what it needs; executors of a cluster still get them through spark.jars
    user_classpath = conf.pop("spark.driver.extraClassPath", None)
    classpath = [*jars, user_classpath] if user_classpath else jars
    settings["spark.driver.extraClassPath"] = os.pathsep.join(classpath)
    settings.update(conf)
    java_options = [
        class_archive.java_options() if use_class_archive else "",
        fixed_heap_options(settings["spark.driver.memory"]),
        settings.get("spark.driver.extraJavaOptions", ""),  # the caller's last: the JVM's last wins
    ]
    settings["spark.driver.extraJavaOptions"] = " ".join(o for o in java_options if o)
    return settings


def fixed_heap_options(driver_memory: str) -> str:
    """-Xms equal to the -Xmx that spark-submit makes of spark.driver.memory, touched at start.

    A heap that grows as it is used makes a months-long driver's RSS climb for its first hours
    and hides a real leak behind it; taken whole at start, what still grows is off the heap
    (as the broker's and the ingest service's, platform/local/kafka_settings.py). Touching 1 GB
    adds ~0.3 s to a JVM's start.
    """
    return f"-Xms{driver_memory} -XX:+AlwaysPreTouch"


def build_spark_session(
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    app_name: str = "tidelake",
    *,
    use_class_archive: bool = True,
) -> SparkSession:
    """Get or create the engine's session (see spark_session_conf).

    A process that builds its own session stops on its own terms: the driver JVM runs in a
    session of its own, so a terminal's Ctrl-C or a SIGTERM to the process group reaches only
    this process (the JVM still ends with it: it exits when its stdin closes), and the SIGINT
    handler in place stays in front of PySpark's, which calls the JVM from inside the handler
    (see spark/interrupts.py)."""
    prepare_environment(master)
    settings = spark_session_conf(master, conf, app_name, use_class_archive=use_class_archive)
    with _handlers_kept():
        _launch_driver_jvm(settings)
        builder = SparkSession.builder
        for key, value in settings.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
    return prepare_session(session)


def _launch_driver_jvm(settings: Mapping[str, str]) -> None:
    """Start the driver JVM (py4j gateway) detached from this process group, unless running,
    bound to die with this process (_jvm_dies_with_this_process)."""
    from pyspark import SparkConf, SparkContext, java_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    launch: Callable[..., Any] = java_gateway.launch_gateway  # untyped in pyspark
    with (
        _environment(jvm_allocator_env()),  # pyspark hands the JVM a copy of os.environ
        _jvm_dies_with_this_process(java_gateway),
    ):
        gateway = launch(conf, popen_kwargs={"start_new_session": True})
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)


_PR_SET_PDEATHSIG = 1


@contextmanager
def _jvm_dies_with_this_process(java_gateway: Any) -> Iterator[None]:
    """The JVM pyspark starts inside the block gets SIGKILL from the kernel when this process
    dies (Linux's PR_SET_PDEATHSIG, set in the child before it execs Java).

    Left alone, a JVM whose Python driver was killed (a SIGKILL of a run's process group
    misses it: it has a session of its own) went on until it noticed its closed stdin, seconds
    later on a loaded machine, still running its batch's MERGE beside the restarted run on the
    same checkpoint. pyspark sets a preexec_fn of its own (SIGINT ignored) and takes none, so
    its Popen is wrapped for the block to run both. The signal fires when the thread that
    started the child ends: it is set only from the main thread, whose end is the process's;
    elsewhere the closed stdin remains the JVM's cue."""
    libc_name = ctypes.util.find_library("c")
    main_thread = threading.current_thread() is threading.main_thread()
    if sys.platform != "linux" or libc_name is None or not main_thread:
        log.info(
            "the driver JVM ends when it notices its closed stdin (not started from the main "
            "thread on Linux)"
        )
        yield
        return
    prctl = ctypes.CDLL(libc_name, use_errno=True).prctl
    parent = os.getpid()
    popen = java_gateway.Popen

    def popen_dying_with_parent(*args: Any, **kwargs: Any) -> Any:
        pyspark_preexec = kwargs.get("preexec_fn")

        def preexec() -> None:  # in the child, between fork and exec
            if pyspark_preexec is not None:
                pyspark_preexec()
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:  # the parent died before the signal was set
                os._exit(1)

        return popen(*args, **{**kwargs, "preexec_fn": preexec})

    java_gateway.Popen = popen_dying_with_parent
    try:
        yield
    finally:
        java_gateway.Popen = popen


JEMALLOC = "libjemalloc.so.2"
"""Debian's libjemalloc2 (scripts/install_debian_packages.sh, run by `make venv`)."""


def jvm_allocator_env(choice: str | None = None) -> dict[str, str]:
    """Variables that give the driver JVM jemalloc as its allocator (TIDELAKE_JVM_MALLOC).

    RocksDB allocates its blocks from many threads; under glibc's allocator the JVM of a
    stream with the state's memory bounded kept growing after the cache was full (+6.6 MB a
    minute with MALLOC_ARENA_MAX=2, +23.5 without), under jemalloc it levelled off
    (docs/benchmarks.md). `auto` uses it where it is installed and says when it is not."""
    choice = choice or host_settings().jvm_malloc
    if choice == "system":
        return {}
    library = installed_jemalloc()
    if library is None:
        if choice == "jemalloc":
            raise ConfigError(
                f"TIDELAKE_JVM_MALLOC=jemalloc: {JEMALLOC} is not installed "
                "(Debian: apt-get install libjemalloc2; or set TIDELAKE_JVM_MALLOC=system)"
            )
        log.warning(
            "%s is not installed: the driver JVM runs on glibc's allocator, under which "
            "RocksDB's memory grows past its bound (apt-get install libjemalloc2)",
            JEMALLOC,
        )
        return {}
    preload = os.environ.get("LD_PRELOAD", "")
    return {"LD_PRELOAD": f"{library} {preload}".strip()}


@cache
def installed_jemalloc() -> str | None:
    """The name LD_PRELOAD takes, if the dynamic loader finds the library (ldconfig's cache)."""
    if ctypes.util.find_library("jemalloc") is None:
        return None
    return JEMALLOC


@contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """os.environ with these values inside the block, as it was after it."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def session_settings(spark: SparkSession, values: Mapping[str, str]) -> Iterator[None]:
    """The session's runtime SQL settings with these values inside the block, as they were after
    it: a run's steps share one session, so one step's settings must not outlive it."""
    before: dict[str, str | None] = {key: spark.conf.get(key, None) for key in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, was in before.items():
            if was is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, was)


@contextmanager
def _handlers_kept() -> Iterator[None]:
    """SIGINT and SIGTERM handlers as they were before the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            if handler is not None:
                signal.signal(sig, handler)


def prepare_environment(master: str) -> None:
    """Environment the driver needs before its JVM starts.

    PySpark takes the Python of planner workers (data sources) from PYSPARK_PYTHON, not from
    spark.pyspark.python, so without it they run the system python3, which lacks tidelake.
    """
    keep_secrets_out_of_py4j_logs()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


QUIET_JVM_LOGGERS = ("org.apache.kafka", "org.apache.spark.sql.kafka010.KafkaOffsetReaderAdmin")
"""Kafka's clients warn on every failed connection attempt and Spark's offset reader on every
retry, each with a stack: an unreachable broker printed ~300 lines before the stream failed with
one line that says so (FlowStream.explain_failure). Their errors still show."""


def prepare_session(spark: SparkSession) -> SparkSession:
    """Quiet Spark's logs on a session, also one built elsewhere (a Dagster resource)."""
    level = host_settings().spark_log_level
    spark.sparkContext.setLogLevel(level)
    if level.upper() in ("WARN", "ERROR", "FATAL", "OFF"):
        jvm = spark._jvm
        assert jvm is not None
        log4j = jvm.org.apache.logging.log4j
        for name in QUIET_JVM_LOGGERS:
            log4j.core.config.Configurator.setLevel(name, log4j.Level.ERROR)
    return spark


class SessionHost(Protocol):
    """What builds a session for a host: a Dagster LazyPySparkResource made of
    spark_session_conf's settings (assets/resources.py)."""

    @property
    def spark_config(self) -> Mapping[str, Any]: ...

    @property
    def spark_session(self) -> SparkSession: ...


@contextmanager
def host_session(host: SessionHost) -> Iterator[SparkSession]:
    """The host's session, prepared, with the host in charge of SIGINT inside the block (see
    spark/interrupts.py).

    Its driver JVM is started here as build_spark_session starts it (a process session of its
    own, jemalloc), and the host's getOrCreate finds it running: left to the host, every JVM of
    a Dagster run, each stream's among them, started on glibc's allocator."""
    settings = {key: str(value) for key, value in host.spark_config.items()}
    prepare_environment(settings["spark.master"])

    def launch_then_create() -> SparkSession:
        _launch_driver_jvm(settings)
        return host.spark_session

    with host_interrupts(launch_then_create) as session:
        yield prepare_session(session)


def keep_secrets_out_of_py4j_logs() -> None:
    """py4j logs every command it sends to the JVM at DEBUG, option values included: a Kafka
    password in kafka.sasl.jaas.config would reach the log in clear text. Its logger never goes
    below INFO, whatever TIDELAKE_LOG_LEVEL says."""
    for name in ("py4j", "py4j.clientserver", "py4j.java_gateway"):
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() < logging.INFO:
            logger.setLevel(logging.INFO)
