"""The names of what a soak samples: the platform's processes by role, the stream's micro-batch
figures, the stream JVM's thread groups and memory, and the age column that judges each series."""

from __future__ import annotations

ROLES = (
    "kafka",
    "stream-jvm",
    "stream-python",
    "detector-jvm",
    "detector-python",
    "dagster-daemon",
    "dagster-webserver",
    "dagster-code-server",
    "dagster-dev",
    "ingest-service",
    "producer",
    "tidelake-dev",
    "other-runs",
)
"""What each process of the platform is; "other-runs" are the runs of the flows the soak does not
feed (call_events' idle stream when --allowed-lateness gives the soak a flow of its own)."""
STREAM_SERIES = (
    "batch_ms_p50",
    "batch_ms_max",
    "batch_less_eviction_ms_p50",
    "eviction_ms_p50",
    "commit_ms_p50",
    "write_ms_p50",
    "planning_ms_p50",
    "state_commit_ms_p50",
    "batch_fixed_ms",
    "batch_ms_per_krow",
    "state_updates_ms_per_krow",
    "rocksdb_get_us",
    "rocksdb_put_us",
    "compaction_written_kb_per_krow",
    "compaction_ms_per_krow",
    "writer_stall_ms",
)
STREAM_THREADS = (
    ("tasks", ("Executor task",)),
    ("driver", ("stream executio",)),
    ("rocksdb", ("rocksdb",)),
    ("gc", ("GC Thread", "G1 ")),
    ("jit", ("C1 CompilerThre", "C2 CompilerThre")),
)
"""The stream JVM's threads by what their names (/proc/PID/task/TID/comm, 15 characters) say:
Spark's tasks, the query's own thread (planning each micro-batch, the foreachBatch call), RocksDB's
background flushes and compactions, the collector, the JIT; the rest is "other". A task's time
includes its RocksDB gets and puts; compaction is not in it."""
THREAD_GROUPS = (*(g for g, _ in STREAM_THREADS), "other")
JVM_MEMORY_SERIES = (
    "jvm_mb_heap_used",
    "jvm_mb_metaspace",
    "jvm_mb_code_cache",
)
"""What the stream JVM says of its own memory (jcmd GC.heap_info, Compiler.codecache): the heap
is fixed (-Xms = -Xmx), so of its RSS's growth these name the JVM's share (generated classes,
compiled code); the rest of its anonymous memory is native: RocksDB, thread stacks, buffers."""

SERIES_AGE = {
    **{f"{kind}_{r}": f"age_s_{r}" for r in ROLES for kind in ("rss_mb", "cpu_pct", "threads")},
    "rss_anon_mb_stream-python": "age_s_stream-python",
    **{name: "age_s_stream-jvm" for name in (*JVM_MEMORY_SERIES, "rss_anon_mb_stream-jvm")},
    **{name: "age_s_stream-jvm" for name in STREAM_SERIES},
    **{f"stream_jvm_cpu_pct_{g}": "age_s_stream-jvm" for g in THREAD_GROUPS},
}
"""The age column that judges a series (common.drift): a role's RSS and CPU by its own process,
the stream's micro-batch figures by its JVM, which a restart leaves cold (JIT, the state's cache)
for minutes after it has caught up."""


def thread_group(name: str) -> str:
    """The STREAM_THREADS group of a stream JVM thread by its name, "other" if none."""
    return next((g for g, prefixes in STREAM_THREADS if name.startswith(prefixes)), "other")
