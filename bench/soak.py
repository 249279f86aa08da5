"""Soak: the platform as a user runs it, fed for an hour or more, with faults; drift, not levels.

Starts a Kafka node of its own (so that it can crash and restart it), `tidelake dev` against it
without the demo producer (Dagster runs the stream under its supervisor, the anomaly detector
and the daily assets), and a producer at --rate events/s with late, duplicate and malformed
events. Every --sample-every seconds it records each micro-batch's duration, eviction and commit
times (from the stream's progress log, TIDELAKE_PROGRESS_LOG), the deduplication state's rows
and memory, every process's RSS and CPU, file counts and sizes (`_delta_log`, the checkpoint,
the table, the quarantine) and Dagster's storage. Every --fault-every minutes it injects the
next fault: the stream's JVM SIGKILLed (its Dagster run fails; the supervisor starts another),
the broker crashed and restarted, a compaction and a vacuum racing the stream. At the end it
waits for the stream to catch up and reads the tables back with DuckDB: every good event once,
every malformed one in quarantine. With --aged the table and the quarantine are first seeded
with the tombstones they carry on a stream's 30th day (a file retention of hourly compactions,
expiring as new ones come), so that the hour measured is a month-old stream's, not a new one's.

Writes samples.jsonl as it samples (a run that fails keeps what it measured), then soak.csv
(one row a sample), soak.png (every series over time) and soak.json (the
summary) to --out-dir, and prints, for each series after the first --settle minutes, the
first-tenth and last-tenth medians, the least-squares slope per hour (also as a share of the
median) and the value that slope reaches at 30 days. Samples taken while a fault is being
recovered from are kept in the CSV and left out of the drift figures; so are a process's RSS
and CPU in its own first --settle minutes (a stream the kill fault restarted, the broker), and the
stream's micro-batch figures in its JVM's (SERIES_AGE).

    python bench/soak.py --minutes 60 --rate 6000
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
import numpy as np
import psutil
from common import drift, state_cost, thread_names, wait_for, write_figures
from delta_log_age import duration_s, seed_tombstones
from soak_flow import LATENESS_ENV, MODULE, soak_flow

from tidelake.platform.local.kafka_cluster import LocalKafkaCluster
from tidelake.platform.local.ports import free_ports
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.stream.progress_log import progress_file
from tidelake.streaming.stream.query import stream_name
from tidelake.streaming.stream.status import committed_batch, kafka_ends, stream_lag

REPO = Path(__file__).resolve().parent.parent
DETECTOR_JOB = "call_anomaly_detector"
FAULTS = ("kill-stream", "restart-broker", "maintenance-race")
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
JVM_MEMORY_EVERY_S = 120.0
"""jcmd starts a JVM of its own (~0.5 s of CPU): the stream JVM is asked every 2 minutes."""
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
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
DAY_S = 86_400.0
SETTLE_OPTION = click.option(
    "--settle",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Minutes a process must have run, and the run too, before its series count.",
)
PRODUCER_TIMEOUT_MS = 600_000
"""How long the soak's producer retries an event: past the broker fault's outage. A broker
SIGKILLed after 50 minutes at 6,000 events/s took 88.5 s to serve again (it recovers its logs),
past the 60 s that `tidelake produce` gives an event, and the producer gave up (sixteenth run)."""


@dataclass
class Soak:
    """The running platform's places and processes."""

    work: Path
    env: dict[str, str]
    flow: FlowSpec
    cluster: LocalKafkaCluster
    dev: subprocess.Popen[bytes]
    producer: multiprocessing.process.BaseProcess | None = None
    started: float = field(default_factory=time.time)

    @property
    def stream_job(self) -> str:
        """The Dagster job of the flow's always-on stream, also its query's name."""
        return stream_name(self.flow)

    @property
    def lake(self) -> Path:
        return self.work / "lake"

    @property
    def table(self) -> Path:
        return self.lake / self.flow.table

    @property
    def quarantine(self) -> Path:
        return self.lake / self.flow.quarantine_table

    @property
    def checkpoint(self) -> Path:
        return self.work / "checkpoints" / self.flow.name

    @property
    def progress_file(self) -> Path:
        return progress_file(self.work / "progress", self.stream_job)

    @property
    def dagster_home(self) -> Path:
        return self.work / "dagster"

    def kafka_conf(self) -> dict[str, str]:
        return {"bootstrap.servers": self.cluster.bootstrap_servers}

    def lag(self) -> int | None:
        """Records on the topic the stream's checkpoint has not committed; None if unknown."""
        try:
            ends = kafka_ends(self.kafka_conf(), self.flow.topic, 5.0)
        except Exception:
            return None
        done = committed_batch(str(self.checkpoint), self.flow.topic)
        return stream_lag(ends, done.offsets if done else {}).total


# ---------------------------------------------------------------------------------------------
# the micro-batches, from the stream's progress log


class BatchReader:
    """Follows the progress log (and its rotations) from where it last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._inode: int | None = None
        self._partial = ""

    def new_batches(self) -> list[dict[str, Any]]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return []
        lines: list[str] = []
        if self._inode is not None and stat.st_ino != self._inode:  # rotated: finish the old
            rotated = self.path.with_name(self.path.name + ".1")
            if rotated.exists():
                lines += self._read(rotated, self._offset)
            self._offset, self._partial = 0, ""
        self._inode = stat.st_ino
        lines += self._read(self.path, self._offset)
        return [json.loads(line) for line in lines if line.strip()]

    def _read(self, path: Path, offset: int) -> list[str]:
        with path.open() as f:
            f.seek(offset)
            text = self._partial + f.read()
            self._offset = f.tell()
        *whole, self._partial = text.split("\n")
        return whole


def batch_cost_fit(batches: list[dict[str, Any]]) -> dict[str, float]:
    """A micro-batch's duration split into what it costs whatever its size and what each row
    adds: the least-squares line of duration against input rows over some batches. A stream that
    runs back to back reads in each batch what arrived during the one before, so its duration is
    fixed / (1 - per_row * rate) and a rise of either shows amplified; this says which rose."""
    rows = np.array([b.get("numInputRows", 0) for b in batches], dtype=float)
    duration = np.array([b["durationMs"].get("triggerExecution", 0) for b in batches], dtype=float)
    if len(batches) < 10 or np.ptp(rows) < 0.2 * np.median(rows):  # too few or too alike
        return {"batch_fixed_ms": np.nan, "batch_ms_per_krow": np.nan}
    per_row, fixed = np.polyfit(rows, duration, 1)
    return {"batch_fixed_ms": float(fixed), "batch_ms_per_krow": float(1000 * per_row)}


def batch_figures(batches: list[dict[str, Any]]) -> dict[str, float]:
    """Medians and maxima of one sample's micro-batches."""
    if not batches:
        return {}
    duration = [b["durationMs"].get("triggerExecution", 0) for b in batches]
    state = [b["stateOperators"][0] for b in batches if b.get("stateOperators")]
    # allRemovalsTimeMs is task time summed over the state partitions, which run side by side
    # (one task per core): the eviction's share of the batch's wall time is about the sum / their
    # number
    eviction = [s.get("allRemovalsTimeMs", 0) for s in state]
    eviction_wall = [
        e / max(1, s.get("numStateStoreInstances", 1)) for e, s in zip(eviction, state, strict=True)
    ]
    commit = [b["tidelake"].get("commit_ms", np.nan) for b in batches]
    write = [b["tidelake"].get("write_ms", np.nan) for b in batches]
    out = {
        "batches": len(batches),
        "rows_in": sum(b.get("numInputRows", 0) for b in batches),
        "batch_ms_p50": float(np.median(duration)),
        "batch_ms_max": float(np.max(duration)),
        "commit_ms_p50": float(np.nanmedian(commit)) if not np.all(np.isnan(commit)) else np.nan,
        "write_ms_p50": float(np.nanmedian(write)) if not np.all(np.isnan(write)) else np.nan,
        "planning_ms_p50": float(
            np.median([b["durationMs"].get("queryPlanning", 0) for b in batches])
        ),
    }
    out |= batch_cost_fit(batches)
    if state:
        last = state[-1]
        out["state_commit_ms_p50"] = float(np.median([s.get("commitTimeMs", 0) for s in state]))
        metrics = last.get("customMetrics") or {}
        every = [s.get("customMetrics") or {} for s in state]

        def total(metric: str) -> float:
            """A RocksDB metric summed over the sample's batches (each reports its own)."""
            return float(sum(m.get(metric, 0) for m in every))

        out |= state_cost(
            rows=out["rows_in"],
            updates_ms=sum(s.get("allUpdatesTimeMs", 0) for s in state),
            gets=int(total("rocksdbGetCount")),
            get_ms=total("rocksdbGetLatency"),
        )
        puts = total("rocksdbPutCount")
        rows_k = max(1, out["rows_in"]) / 1000
        out |= {
            # RocksDB's own work per row, behind the state's task time: a put's latency, what
            # its background compactions rewrite and how long writes were stalled for them
            "rocksdb_put_us": 1000 * total("rocksdbPutLatency") / puts if puts else np.nan,
            "compaction_written_kb_per_krow": (
                total("rocksdbTotalBytesWrittenByCompaction") / 1024 / rows_k
            ),
            "compaction_ms_per_krow": total("rocksdbTotalCompactionLatencyMs") / rows_k,
            "writer_stall_ms": total("rocksdbWriterStallLatencyMs"),
            "eviction_ms_p50": float(np.median(eviction)),
            "batch_less_eviction_ms_p50": float(
                np.median([d - e for d, e in zip(duration, eviction_wall, strict=False)])
            ),
            "state_rows": float(last.get("numRowsTotal", 0)),
            "state_memory_mb": last.get("memoryUsedBytes", 0) / 2**20,
            "state_sst_mb": metrics.get("rocksdbSstFileSize", 0) / 2**20,
        }
    return out


# ---------------------------------------------------------------------------------------------
# processes, files, storage


def thread_cpu_s(pid: int) -> dict[int, tuple[str, float]]:
    """Each live thread of a process: its name and CPU seconds so far."""
    out: dict[int, tuple[str, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        ticks = fields.split()
        out[int(tid)] = (name, (int(ticks[11]) + int(ticks[12])) / _CLOCK_TICKS)  # utime, stime
    return out


def _anonymous_mb(pid: int) -> float:
    """A process's anonymous resident memory (heaps, thread stacks): what grows when native
    allocations do, apart from mapped files such as libraries."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Anonymous:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


_HEAP_USED = re.compile(r"heap\s+total \d+K, used (\d+)K")
_METASPACE = re.compile(r"^\s*Metaspace\s+used \d+K, committed (\d+)K", re.MULTILINE)
_CODE_HEAP_USED = re.compile(r"^CodeHeap '[^']+': size=\d+Kb used=(\d+)Kb", re.MULTILINE)


def jvm_memory_mb(pid: int) -> dict[str, float]:
    """The heap's used part, the metaspace's committed part and the code cache's used part of a
    running JVM, from its own JDK's jcmd; empty if it cannot be asked."""
    try:
        jcmd = Path(os.readlink(f"/proc/{pid}/exe")).with_name("jcmd")
    except OSError:
        return {}

    def ask(command: str) -> str:
        done = subprocess.run(
            [str(jcmd), str(pid), command], capture_output=True, text=True, timeout=30
        )
        return done.stdout if done.returncode == 0 else ""

    try:
        heap, code = ask("GC.heap_info"), ask("Compiler.codecache")
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out: dict[str, float] = {}
    if used := _HEAP_USED.search(heap):
        out["jvm_mb_heap_used"] = int(used.group(1)) / 1024
    if meta := _METASPACE.search(heap):
        out["jvm_mb_metaspace"] = int(meta.group(1)) / 1024
    if heaps := _CODE_HEAP_USED.findall(code):
        out["jvm_mb_code_cache"] = sum(int(k) for k in heaps) / 1024
    return out


def thread_group(name: str) -> str:
    return next((g for g, prefixes in STREAM_THREADS if name.startswith(prefixes)), "other")


class ProcessSampler:
    """RSS and CPU of every process of the platform, by role; the stream JVM's CPU by thread
    group too (STREAM_THREADS)."""

    def __init__(self, soak: Soak) -> None:
        self.soak = soak
        self._cpu: dict[int, float] = {}
        self._threads: dict[int, dict[int, tuple[str, float]]] = {}
        self.other_threads: Counter[str] = Counter()
        """CPU seconds of the stream JVM's "other" threads by name, over the run."""
        self.driver_threads: Counter[str] = Counter()
        """The stream's Python driver's threads by name, at the last sample."""
        self._at = time.monotonic()
        self._wall_at = time.time()
        self._jvm_memory: dict[str, float] = {}
        self._jvm_memory_at = 0.0

    def sample(self) -> dict[str, float]:
        workers = _live_run_workers(self.soak.dagster_home)
        rss = dict.fromkeys(ROLES, 0.0)
        cpu_s = dict.fromkeys(ROLES, 0.0)
        threads = dict.fromkeys(ROLES, 0.0)
        anon_mb = jvm_anon_mb = 0.0
        driver_threads: Counter[str] = Counter()
        born = dict.fromkeys(ROLES, 0.0)  # the role's youngest process
        cpu_now: dict[int, float] = {}
        threads_now: dict[int, dict[int, tuple[str, float]]] = {}
        by_thread = dict.fromkeys(THREAD_GROUPS, 0.0)
        for proc, role in self._processes(workers):
            try:
                mem = proc.memory_info().rss
                times = proc.cpu_times()
            except psutil.Error:
                continue
            used = times.user + times.system
            cpu_now[proc.pid] = used
            rss[role] += mem / 2**20
            try:
                threads[role] += proc.num_threads()
                if role == "stream-python":
                    anon_mb += _anonymous_mb(proc.pid)
                    driver_threads.update(thread_names(proc.pid))
                created = proc.create_time()
            except psutil.Error:
                continue
            born[role] = max(born[role], created)
            new = created > self._wall_at  # born since the last sample
            cpu_s[role] += used - self._cpu.get(proc.pid, 0.0 if new else used)
            if role == "stream-jvm":
                jvm_anon_mb += _anonymous_mb(proc.pid)
                self._ask_jvm_memory(proc.pid)
                jvm_threads = threads_now[proc.pid] = thread_cpu_s(proc.pid)
                seen = self._threads.get(proc.pid, {} if new else None)
                if seen is None:  # first sight of a JVM older than the sampler: a baseline
                    continue
                # (a thread that ended since the last sample is not counted for that interval)
                for tid, (name, seconds) in jvm_threads.items():
                    spent, group = seconds - seen.get(tid, ("", 0.0))[1], thread_group(name)
                    by_thread[group] += spent
                    if group == "other":
                        self.other_threads[name] += spent
        now = time.monotonic()
        wall, self._at, self._cpu = now - self._at, now, cpu_now
        self._threads = threads_now
        self.driver_threads = driver_threads or self.driver_threads
        self._wall_at = time.time()
        out = {f"rss_mb_{r}": rss[r] for r in ROLES}
        out |= {f"cpu_pct_{r}": 100 * cpu_s[r] / wall for r in ROLES}
        out |= {f"threads_{r}": threads[r] for r in ROLES}
        out["rss_anon_mb_stream-python"] = anon_mb
        out["rss_anon_mb_stream-jvm"] = jvm_anon_mb
        out |= {name: self._jvm_memory.get(name, np.nan) for name in JVM_MEMORY_SERIES}
        out |= {f"stream_jvm_cpu_pct_{g}": 100 * s / wall for g, s in by_thread.items()}
        out |= {f"age_s_{r}": self._wall_at - born[r] for r in ROLES if born[r]}
        out["rss_mb_total"] = sum(rss.values())
        return out

    def _ask_jvm_memory(self, pid: int) -> None:
        """Refresh the stream JVM's own figures when they are older than JVM_MEMORY_EVERY_S
        (a sample between two asks repeats the last answer)."""
        if time.monotonic() - self._jvm_memory_at >= JVM_MEMORY_EVERY_S:
            self._jvm_memory = jvm_memory_mb(pid)
            self._jvm_memory_at = time.monotonic()

    def _processes(self, workers: dict[int, str]) -> Iterator[tuple[psutil.Process, str]]:
        broker_pid = self.soak.cluster.broker(1).pid
        if broker_pid is not None:
            yield from _tree(broker_pid, "kafka")
        if self.soak.producer is not None and self.soak.producer.pid is not None:
            yield from _tree(self.soak.producer.pid, "producer")
        try:
            dev = psutil.Process(self.soak.dev.pid)
        except psutil.Error:
            return
        yield dev, "tidelake-dev"
        seen = {dev.pid}
        for proc in dev.children(recursive=True):
            if proc.pid in seen:
                continue
            role = _role(proc, workers, self.soak.stream_job)
            if role in ("stream", "detector", "other-runs"):
                for member, _ in _tree(proc.pid, role):
                    seen.add(member.pid)
                    if role == "other-runs":
                        yield member, role
                    else:
                        yield member, f"{role}-{'jvm' if _is_java(member) else 'python'}"
            elif role is not None:
                seen.add(proc.pid)
                yield proc, role


def _tree(pid: int, role: str) -> Iterator[tuple[psutil.Process, str]]:
    try:
        root = psutil.Process(pid)
        members = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for proc in members:
        yield proc, role


def _is_java(proc: psutil.Process) -> bool:
    try:
        return proc.name() == "java"
    except psutil.Error:
        return False


def _role(proc: psutil.Process, workers: dict[int, str], stream_job: str) -> str | None:
    if proc.pid in workers:
        job = workers[proc.pid]
        return {stream_job: "stream", DETECTOR_JOB: "detector"}.get(job, "other-runs")
    try:
        cmd = " ".join(proc.cmdline())
    except psutil.Error:
        return None
    if "dagster-daemon" in cmd or "dagster._daemon" in cmd:
        return "dagster-daemon"
    if "dagster-webserver" in cmd or "dagster_webserver" in cmd:
        return "dagster-webserver"
    if "api grpc" in cmd or "code-server" in cmd:
        return "dagster-code-server"
    if "java" in cmd and "ingest" in cmd.lower():
        return "ingest-service"
    if "tidelake.platform.cli serve" in cmd:
        return "ingest-service"
    return "dagster-dev" if "dagster" in cmd or " dg " in cmd or cmd.endswith(" dev") else None


_WORKER_LINE = re.compile(r"stream worker pid (\d+)")
_workers: dict[str, tuple[int, str] | None] = {}


def _live_run_workers(dagster_home: Path) -> dict[int, str]:
    """pid -> job name of the run workers of the runs in progress: each always-on run logs
    "stream worker pid N" when it starts (assets/stream/always_on.py)."""
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(dagster_home)
    out: dict[int, str] = {}
    try:
        with dg.DagsterInstance.get() as instance:
            runs = instance.get_runs(
                dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING])
            )
            for run in runs:
                if _workers.get(run.run_id) is None:
                    _workers[run.run_id] = _worker(instance, run.run_id, run.job_name)
                found = _workers[run.run_id]
                if found is not None:
                    out[found[0]] = found[1]
    except Exception:  # the instance is being written; next sample
        pass
    return out


def _worker(instance: Any, run_id: str, job_name: str) -> tuple[int, str] | None:
    for entry in instance.all_logs(run_id):
        match = _WORKER_LINE.search(entry.user_message or "")
        if match:
            return int(match.group(1)), job_name
    return None


def folder_figures(name: str, root: Path, skip: str | None = None) -> dict[str, float]:
    """Files and MB under a folder (without the subfolder `skip`)."""
    files = size = 0
    for folder, dirs, names in os.walk(root):
        if skip is not None and skip in dirs:
            dirs.remove(skip)
        for n in names:
            try:
                size += os.stat(os.path.join(folder, n)).st_size
                files += 1
            except FileNotFoundError:
                continue
    return {f"{name}_files": float(files), f"{name}_mb": size / 2**20}


def checkpoint_figures(name: str, table: Path) -> dict[str, float]:
    """Live files and actions of the table's newest checkpoint (`_last_checkpoint`): what every
    reader's snapshot holds and every checkpoint rewrites, as of the stream's last checkpoint
    (at most delta.checkpointInterval commits ago)."""
    try:
        last = json.loads((table / "_delta_log" / "_last_checkpoint").read_text())
    except (FileNotFoundError, json.JSONDecodeError):  # none yet, or being replaced
        return {}
    return {
        f"{name}_live_files": float(last.get("numOfAddFiles", np.nan)),
        f"{name}_checkpoint_actions": float(last.get("size", np.nan)),
    }


def storage_figures(soak: Soak) -> dict[str, float]:
    out: dict[str, float] = {}
    out |= folder_figures("delta_log", soak.table / "_delta_log")
    out |= folder_figures("table", soak.table, skip="_delta_log")
    out |= folder_figures("quarantine", soak.quarantine, skip="_delta_log")
    out |= checkpoint_figures("table", soak.table)
    out |= checkpoint_figures("quarantine", soak.quarantine)
    out |= folder_figures("checkpoint", soak.checkpoint)
    out |= folder_figures("checkpoint_state", soak.checkpoint / "state")
    out |= folder_figures("dagster", soak.dagster_home)
    out |= folder_figures("progress_log", soak.progress_file.parent)
    return out


# ---------------------------------------------------------------------------------------------
# faults


@dataclass
class FaultRecord:
    name: str
    at_s: float
    detail: str = ""
    first_batch_after_s: float | None = None
    caught_up_after_s: float | None = None


def run_fault(soak: Soak, name: str, baseline_lag: float, rate: float) -> FaultRecord:
    record = FaultRecord(name, time.time() - soak.started)
    began = time.time()
    if name == "kill-stream":
        pids = [
            p.pid
            for p, role in ProcessSampler(soak)._processes(_live_run_workers(soak.dagster_home))
            if role == "stream-jvm"
        ]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        record.detail = f"SIGKILL to the stream's JVM {pids}"
    elif name == "restart-broker":
        soak.cluster.kill(1)
        time.sleep(5)
        soak.cluster.restart(1)
        record.detail = f"broker SIGKILLed, restarted after {time.time() - began:.1f} s"
    else:
        record.detail = maintenance_race(soak)
        return record
    last_batch = _last_batch_time(soak)
    threshold = max(baseline_lag * 1.5, 2 * rate)
    deadline = time.time() + 900
    while time.time() < deadline:
        now_batch = _last_batch_time(soak)
        if record.first_batch_after_s is None and now_batch and now_batch > max(began, last_batch):
            record.first_batch_after_s = now_batch - began
        lag = soak.lag()
        if record.first_batch_after_s is not None and lag is not None and lag <= threshold:
            record.caught_up_after_s = time.time() - began
            break
        time.sleep(2)
    return record


def _last_batch_time(soak: Soak) -> float:
    """When the stream's newest micro-batch ended: its commit file's time."""
    commits = soak.checkpoint / "commits"
    try:
        return max((p.stat().st_mtime for p in commits.iterdir() if p.name.isdigit()), default=0)
    except FileNotFoundError:
        return 0.0


def maintenance_race(soak: Soak) -> str:
    """A compaction of today and a vacuum of the table, each a process of its own, as the
    maintenance assets run them, while the stream commits."""
    today = datetime.now(UTC).date().isoformat()
    code = (
        "import json,sys,time\n"
        "from tidelake.streaming.delta.maintenance import compact_partition, vacuum_table\n"
        "t=time.time(); c=compact_partition(sys.argv[1], sys.argv[2], sys.argv[3])\n"
        "v=vacuum_table(sys.argv[1])\n"
        "print(json.dumps({'compaction_s': round(c.seconds,1), 'files_before': c.before.files,"
        " 'files_after': c.after.files, 'vacuum_removed': v.removed_files,"
        " 'seconds': round(time.time()-t,1)}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(soak.table), soak.flow.partition_column, today],
        env=soak.env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        return f"maintenance failed: {done.stderr.strip().splitlines()[-1:]}"
    return done.stdout.strip()


# ---------------------------------------------------------------------------------------------
# the platform


AGED_FILES_PER_HOUR = {"table": 14_000, "quarantine": 6_500}
"""The stream's small files an hour that the hourly compaction turns into tombstones, at 6,000
events/s and the default trigger (the twelfth soak): `--aged` seeds a file retention of them."""


def seed_aged_state(soak: Soak) -> dict[str, int]:
    """The tombstones the table and the quarantine carry on a stream's 30th day (a file retention
    of hourly compactions), seeded once the stream has created them and before it is fed, so
    that their checkpoints cost what they cost in a month, not in a stream's first hour."""
    retention_s = duration_s(EngineSettings().delta_log_retention)
    now_s = time.time()
    seeded = {}
    for name, table in (("table", soak.table), ("quarantine", soak.quarantine)):
        count = int(AGED_FILES_PER_HOUR[name] * retention_s / 3600)
        seed_tombstones(str(table), count, retention_s, now_s)
        seeded[name] = count
    return seeded


def fed_flow(lateness_min: float | None) -> FlowSpec:
    """The flow the soak feeds: call_events as shipped, or with `lateness_min` minutes of
    allowed lateness as a flow of its own (soak_flow.py)."""
    return CALL_EVENTS if lateness_min is None else soak_flow(timedelta(minutes=lateness_min))


@contextmanager
def platform(work: Path, trigger_interval: str, flow: FlowSpec) -> Iterator[Soak]:
    cluster = LocalKafkaCluster(1, min_insync=1, folder=work / "kafka")
    cluster.start()
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": cluster.bootstrap_servers,
        "TIDELAKE_HOME": str(work / "home"),
        "TIDELAKE_LAKE": str(work / "lake"),
        "TIDELAKE_CHECKPOINTS": str(work / "checkpoints"),
        "TIDELAKE_PROGRESS_LOG": str(work / "progress"),
        "TIDELAKE_TRIGGER_INTERVAL": trigger_interval,
        "DAGSTER_HOME": str(work / "dagster"),
    }
    if flow is not CALL_EVENTS:  # the soak's own flow, declared as a deployment declares one
        env[LATENESS_ENV] = str(flow.allowed_lateness.total_seconds())
        env["TIDELAKE_FLOW_MODULES"] = MODULE
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO / "bench"), os.environ.get("PYTHONPATH")) if p
        )
    dagster_port, ingest_port = free_ports(2)
    command = [
        str(Path(sys.executable).with_name("tidelake")),
        "dev",
        "--rate",
        "0",
        "--port",
        str(dagster_port),
        "--ingest-port",
        str(ingest_port),
    ]
    log = (work / "dev.log").open("wb")
    dev = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    soak = Soak(work, env, flow, cluster, dev)
    try:
        yield soak
    finally:
        if soak.producer is not None and soak.producer.is_alive():
            soak.producer.terminate()
        _stop_group(dev, 240)
        cluster.stop()
        log.close()


def _stop_group(process: subprocess.Popen[bytes], grace_s: float) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def produce(
    bootstrap: str,
    lateness_min: float | None,
    rate: float,
    seconds: float,
    shares: dict[str, float],
    report: str,
) -> None:
    """The producer process: demo CallEvents of the fed flow at `rate` for `seconds`, its report
    to a file."""
    from tidelake.platform.dev.produce import produce_demo_events

    result = produce_demo_events(
        fed_flow(lateness_min),
        {"bootstrap.servers": bootstrap, "message.timeout.ms": PRODUCER_TIMEOUT_MS},
        rate=rate,
        duration_s=seconds,
        progress=False,
        seed=38,
        **shares,
    )
    Path(report).write_text(json.dumps(asdict(result), default=str))


def read_back(soak: Soak) -> dict[str, int]:
    """The tables as DuckDB reads them (its delta extension; no Spark, no delta-rs)."""
    import duckdb
    import duckdb_extension_delta

    extension = next(Path(duckdb_extension_delta.__file__).parent.rglob("*.duckdb_extension"))
    con = duckdb.connect()
    try:
        con.load_extension(str(extension))
        rows, distinct = con.sql(
            f"select count(*), count(distinct call_sid) from delta_scan('{soak.table}')"
        ).fetchone()  # type: ignore[misc]
        (quarantined,) = con.sql(f"select count(*) from delta_scan('{soak.quarantine}')").fetchone()  # type: ignore[misc]
    finally:
        con.close()
    return {"rows": rows, "distinct_keys": distinct, "quarantined": quarantined}


# ---------------------------------------------------------------------------------------------
# drift


def plot(rows: list[dict[str, float]], faults: list[FaultRecord], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[tuple[str, list[str]]] = [
        ("micro-batch (ms, median a sample)", ["batch_ms_p50", "batch_less_eviction_ms_p50"]),
        (
            "eviction, commits, planning (ms)",
            [
                "eviction_ms_p50",
                "commit_ms_p50",
                "write_ms_p50",
                "planning_ms_p50",
                "state_commit_ms_p50",
            ],
        ),
        ("a micro-batch: fixed ms, ms per 1,000 rows", ["batch_fixed_ms", "batch_ms_per_krow"]),
        ("dedup state", ["state_rows", "state_memory_mb", "state_sst_mb"]),
        ("state per row", ["state_updates_ms_per_krow", "rocksdb_get_us", "rocksdb_put_us"]),
        (
            "RocksDB compaction per 1,000 rows",
            ["compaction_written_kb_per_krow", "compaction_ms_per_krow"],
        ),
        (
            "stream JVM CPU by thread (% of a core)",
            [f"stream_jvm_cpu_pct_{g}" for g in THREAD_GROUPS],
        ),
        (
            "stream JVM memory (MB): RSS, anonymous; heap used, metaspace, code cache (jcmd)",
            ["rss_mb_stream-jvm", "rss_anon_mb_stream-jvm", *JVM_MEMORY_SERIES],
        ),
        ("lag (records)", ["lag"]),
        ("RSS (MB)", [f"rss_mb_{r}" for r in ROLES] + ["rss_mb_total"]),
        ("CPU (% of a core)", [f"cpu_pct_{r}" for r in ROLES]),
        ("threads", [f"threads_{r}" for r in ROLES]),
        ("files", ["delta_log_files", "checkpoint_files", "table_files", "quarantine_files"]),
        (
            "live files and checkpoint actions (newest checkpoint)",
            [
                "table_live_files",
                "quarantine_live_files",
                "table_checkpoint_actions",
                "quarantine_checkpoint_actions",
            ],
        ),
        ("MB on disk", ["delta_log_mb", "checkpoint_mb", "dagster_mb", "progress_log_mb"]),
    ]
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 3 * len(panels)), sharex=True)
    minutes = [r["t_s"] / 60 for r in rows]
    for ax, (title, names) in zip(axes, panels, strict=True):
        for name in names:
            values = [r.get(name, np.nan) for r in rows]
            if not np.allclose(np.nan_to_num(values), 0):
                label = name.replace("rss_mb_", "").replace("stream_jvm_cpu_pct_", "")
                label = label.replace("threads_", "")
                ax.plot(minutes, values, label=label.replace("cpu_pct_", ""))
        for f in faults:
            ax.axvline(f.at_s / 60, color="grey", linestyle=":", linewidth=1)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, ncol=4, loc="upper left")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("minutes (dotted: faults)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


# ---------------------------------------------------------------------------------------------


@click.command()
@click.option("--minutes", type=click.FloatRange(min=2), default=60.0, show_default=True)
@click.option("--rate", type=click.FloatRange(min=1), default=6000.0, show_default=True)
@click.option("--sample-every", type=click.FloatRange(5, 60), default=30.0, show_default=True)
@click.option(
    "--fault-every",
    type=click.FloatRange(min=0),
    default=15.0,
    show_default=True,
    help="Minutes between faults (0: none): the stream killed, the broker crashed, maintenance.",
)
@SETTLE_OPTION
@click.option(
    "--trigger-interval",
    default=lambda: EngineSettings().trigger_interval,
    show_default="the engine's default",
    help="TIDELAKE_TRIGGER_INTERVAL of the stream.",
)
@click.option(
    "--allowed-lateness",
    "lateness_min",
    type=click.FloatRange(min=1),
    help="Minutes. Feed CallEvent as a flow of its own with this lateness (a key lives 2.5x "
    "it) instead of call_events (2 h: keys live 5 h), so that the state stops growing inside the "
    "run. call_events' stream and detector then run idle.",
)
@click.option(
    "--aged/--new",
    default=False,
    show_default=True,
    help="Seed the table and the quarantine, before feeding them, with the tombstones a stream's "
    "30th day carries (AGED_FILES_PER_HOUR over the file retention), expiring as new ones come.",
)
@click.option("--late-share", type=click.FloatRange(0, 1), default=0.05, show_default=True)
@click.option("--duplicate-share", type=click.FloatRange(0, 1), default=0.01, show_default=True)
@click.option("--malformed-share", type=click.FloatRange(0, 1), default=0.001, show_default=True)
@click.option("--workdir", type=click.Path(path_type=Path), help="Kept; default: a temp folder.")
@click.option(
    "--out-dir",
    type=click.Path(path_type=Path),
    default=REPO / "bench-results" / "soak",
    show_default=True,
)
def main(
    minutes: float,
    rate: float,
    sample_every: float,
    fault_every: float,
    settle: float,
    trigger_interval: str,
    lateness_min: float | None,
    aged: bool,
    late_share: float,
    duplicate_share: float,
    malformed_share: float,
    workdir: Path | None,
    out_dir: Path,
) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    work = workdir or Path(tempfile.mkdtemp(prefix="tidelake-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    flow = fed_flow(lateness_min)
    print(
        f"soak: {minutes:.0f} min at {rate:.0f} events/s, trigger {trigger_interval!r}, flow "
        f"{flow.name} ({flow.allowed_lateness} of lateness), "
        f"in {work}"
    )
    shares = {
        "late_share": late_share,
        "duplicate_share": duplicate_share,
        "malformed_share": malformed_share,
    }
    for signum in (signal.SIGTERM, signal.SIGHUP):  # unwind as Ctrl-C does: the platform's
        signal.signal(signum, _interrupt)  # exit stops `tidelake dev` and the broker
    with platform(work, trigger_interval, flow) as soak:
        wait_for(lambda: (soak.table / "_delta_log").exists(), 600, "the stream's table")
        wait_for(lambda: soak.progress_file.exists(), 600, "the stream's first batch")
        print(f"stream up after {time.time() - soak.started:.0f} s")
        seeded = {}
        if aged:
            wait_for(lambda: (soak.quarantine / "_delta_log").exists(), 60, "the quarantine")
            seeded = seed_aged_state(soak)
            print(f"seeded tombstones of a 30th day: {seeded}")
        print("producing")
        report_file = work / "produced.json"
        soak.producer = multiprocessing.get_context("spawn").Process(
            target=produce,
            args=(
                soak.cluster.bootstrap_servers,
                lateness_min,
                rate,
                minutes * 60,
                shares,
                str(report_file),
            ),
            daemon=False,
        )
        soak.started = started_at = time.time()
        soak.producer.start()
        rows, faults, processes = sample_until_done(
            soak, minutes * 60, sample_every, fault_every * 60, rate, out_dir / "samples.jsonl"
        )
        soak.producer.join(600)
        produced = json.loads(report_file.read_text())
        print("producer done; waiting for the stream to catch up")
        caught_up = _wait(lambda: soak.lag() == 0, 1200)
        counts = read_back(soak)
        print(f"read back: {counts}; produced: {produced}", flush=True)
        final_storage = storage_figures(soak)
    with (out_dir / "soak.csv").open("w", newline="") as f:  # first: a failure below loses none
        names = sorted({k for r in rows for k in r}, key=lambda k: (k != "t_s", k))
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        writer.writerows(rows)
    summary = summarize(rows, faults, produced, counts, caught_up, settle * 60, minutes, rate)
    summary["final_storage"] = final_storage
    summary["started_at"] = datetime.fromtimestamp(started_at, UTC).isoformat()
    summary["trigger_interval"] = trigger_interval
    summary["seeded_tombstones"] = seeded
    summary["flow"] = {
        "name": soak.flow.name,
        "allowed_lateness_s": soak.flow.allowed_lateness.total_seconds(),
    }
    summary["stream_jvm_other_threads_cpu_s"] = dict(processes.other_threads.most_common(12))
    summary["stream_python_threads"] = dict(processes.driver_threads.most_common())
    plot(rows, faults, out_dir / "soak.png")
    write_figures(out_dir / "soak.json", summary)
    print_summary(summary)
    print(f"wrote {out_dir / 'soak.csv'}, soak.png, soak.json; the platform's files: {work}")
    if summary["lost"] or summary["duplicated"] or summary["quarantine_mismatch"]:
        sys.exit(1)


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"soak: {signal.Signals(signum).name}")


def _wait(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(2)
    return False


def sample_until_done(
    soak: Soak,
    run_s: float,
    every_s: float,
    fault_every_s: float,
    rate: float,
    samples_file: Path,
) -> tuple[list[dict[str, float]], list[FaultRecord], ProcessSampler]:
    """Sample every `every_s` while the producer runs; faults from a thread of their own. Also
    the sampler, which holds what it counted by thread over the run. Each sample is appended to
    `samples_file` as it is taken."""
    batches = BatchReader(soak.progress_file)
    batches.new_batches()  # the start's own batches are not the soak's
    samples_file.unlink(missing_ok=True)
    processes = ProcessSampler(soak)
    rows: list[dict[str, float]] = []
    faults: list[FaultRecord] = []
    recovering = threading.Event()
    lags: list[float] = []

    def inject() -> None:
        schedule = [fault_every_s * (i + 1) for i in range(int(run_s // fault_every_s) or 0)]
        schedule = [t for t in schedule if t < run_s - 60] if fault_every_s else []
        for i, at in enumerate(schedule):
            time.sleep(max(0.0, soak.started + at - time.time()))
            name = FAULTS[i % len(FAULTS)]
            recovering.set()
            baseline = float(np.median(lags[-4:])) if lags else rate
            record = run_fault(soak, name, baseline, rate)
            recovering.clear()
            faults.append(record)
            print(f"  fault {record}")

    injector = threading.Thread(target=inject, daemon=True)
    if fault_every_s:
        injector.start()
    next_at = soak.started + every_s
    while time.time() < soak.started + run_s:
        time.sleep(max(0.0, next_at - time.time()))
        next_at += every_s
        row: dict[str, float] = {"t_s": round(time.time() - soak.started, 1)}
        row["recovering"] = float(recovering.is_set())
        row |= batch_figures(batches.new_batches())
        lag = soak.lag()
        row["lag"] = float(lag) if lag is not None else np.nan
        if lag is not None and not recovering.is_set():
            lags.append(lag)
        row |= processes.sample()
        row |= storage_figures(soak)
        rows.append(row)
        with samples_file.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(_progress_line(row), flush=True)
    injector.join(timeout=1200) if fault_every_s else None
    for r in rows:
        r["recovering"] = bool(r["recovering"])
    return rows, faults, processes


def _progress_line(row: dict[str, float]) -> str:
    return (
        f"  {row['t_s'] / 60:5.1f} min  batches {row.get('batches', 0):3.0f}  "
        f"batch p50 {row.get('batch_ms_p50', np.nan):6.0f} ms  "
        f"eviction {row.get('eviction_ms_p50', np.nan):5.0f} ms  "
        f"commit {row.get('commit_ms_p50', np.nan):5.0f} ms  lag {row['lag']:8.0f}  "
        f"state {row.get('state_memory_mb', np.nan):6.1f} MB  "
        f"RSS {row['rss_mb_total']:6.0f} MB  _delta_log {row['delta_log_files']:6.0f}  "
        f"dagster {row['dagster_mb']:6.1f} MB" + ("  (recovering)" if row["recovering"] else "")
    )


def summarize(
    rows: list[dict[str, float]],
    faults: list[FaultRecord],
    produced: dict[str, Any],
    counts: dict[str, int],
    caught_up: bool,
    settle_s: float,
    minutes: float,
    rate: float,
) -> dict[str, Any]:
    good, malformed = produced["good"], produced["malformed"]
    return {
        "minutes": minutes,
        "rate": rate,
        "produced": {k: v for k, v in produced.items() if k != "keys"},
        "read_back": counts,
        "caught_up": caught_up,
        "lost": max(0, good - counts["distinct_keys"]),
        "duplicated": counts["rows"] - counts["distinct_keys"],
        "unexpected_rows": max(0, counts["distinct_keys"] - good),
        "quarantine_mismatch": counts["quarantined"] - malformed,
        "faults": [asdict(f) for f in faults],
        "drift": drift(rows, settle_s, minutes * 60, SERIES_AGE),
        "per_day": per_day(rows, minutes * 60),
    }


def per_day(rows: list[dict[str, float]], run_s: float) -> dict[str, float]:
    """Growth of each storage series over the run, scaled to a day."""
    if len(rows) < 2:
        return {}
    first, last = rows[0], rows[-1]
    span = last["t_s"] - first["t_s"]
    names = [k for k in last if k.endswith(("_files", "_mb")) and k in first]
    return {n: (last[n] - first[n]) * DAY_S / span for n in names}


def print_summary(summary: dict[str, Any]) -> None:
    print(
        f"\nproduced {summary['produced']['produced']:,} ({summary['produced']['good']:,} good, "
        f"{summary['produced']['malformed']:,} malformed, {summary['produced']['duplicates']:,} "
        f"repeats); read back {summary['read_back']['rows']:,} rows, "
        f"{summary['read_back']['distinct_keys']:,} keys, {summary['read_back']['quarantined']:,} "
        f"quarantined: lost {summary['lost']}, duplicated {summary['duplicated']}, "
        f"quarantine off by {summary['quarantine_mismatch']}, caught up: {summary['caught_up']}"
    )
    for f in summary["faults"]:
        print(
            f"fault {f['name']} at {f['at_s'] / 60:.1f} min: {f['detail']}; first batch after "
            f"{f['first_batch_after_s']} s, caught up after {f['caught_up_after_s']} s"
        )
    print()
    print_drift(summary["drift"])
    print("\nthe stream JVM's ungrouped threads, CPU seconds over the run:")
    for name, seconds in summary.get("stream_jvm_other_threads_cpu_s", {}).items():
        print(f"  {name:28} {seconds:12.1f}")
    print("\nthe stream's Python driver's threads at the last sample:")
    for name, count in summary.get("stream_python_threads", {}).items():
        print(f"  {name:28} {count:12d}")
    print("\ngrowth per day (from the run's first to last sample):")
    for name, value in sorted(summary["per_day"].items()):
        print(f"  {name:28} {value:12.1f}")


def print_drift(figures: dict[str, dict[str, float]], only: tuple[str, ...] = ()) -> None:
    """common.drift's figures as a table, the series named by a prefix in `only` (all if none)."""
    heads = ("first 10%", "last 10%", "slope/h", "%/h", "30 days")
    print(f"{'series':34} " + " ".join(f"{h:>11}" for h in heads))
    for name, d in sorted(figures.items()):
        if only and not name.startswith(only):
            continue
        print(
            f"{name:34} {d['first_tenth']:11.1f} {d['last_tenth']:11.1f} {d['slope_per_h']:11.2f} "
            f"{d['slope_pct_per_h']:11.1f} {d['at_30_days']:11.1f}"
        )


if __name__ == "__main__":
    main()
