"""Shared pieces of the benchmarks: a broker, a lake on local disk or S3, the process-tree
sampler, Delta commit times, the drift of sampled series."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import psutil

from tidelake.platform.local.kafka_broker import LocalKafkaBroker
from tidelake.platform.local.s3_server import LocalS3Server
from tidelake.streaming.polling import poll_until
from tidelake.streaming.settings import kafka_client_config
from tidelake.streaming.storage.location import Location

T = TypeVar("T")


def thread_names(pid: int | str = "self") -> Counter[str]:
    """A process's threads by name, Python's and native ones alike, as the kernel lists them
    (/proc/PID/task/TID/comm, 15 characters); a thread that ends meanwhile is left out."""
    names: Counter[str] = Counter()
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return names
    for task in tasks:
        try:
            names[(task / "comm").read_text().strip()] += 1
        except OSError:
            continue
    return names


@contextmanager
def lake_env(store: str, work: Path) -> Iterator[dict[str, str]]:
    """TIDELAKE_LAKE and TIDELAKE_CHECKPOINTS under `work` on local disk ("local"), or under a
    prefix of work's name on a local S3 server started for the block ("s3", with the server's
    AWS settings)."""
    if store == "local":
        yield {
            "TIDELAKE_LAKE": str(work / "lake"),
            "TIDELAKE_CHECKPOINTS": str(work / "checkpoints"),
        }
        return
    with LocalS3Server() as s3:
        yield s3.env() | {
            "TIDELAKE_LAKE": s3.uri(work.name, "lake"),
            "TIDELAKE_CHECKPOINTS": s3.uri(work.name, "checkpoints"),
        }


@contextmanager
def kafka() -> Iterator[dict[str, str]]:
    """KAFKA_BOOTSTRAP_SERVERS if set, else a private local Kafka broker."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        yield kafka_client_config()
        return
    with LocalKafkaBroker() as broker:
        yield {"bootstrap.servers": broker.bootstrap_servers}


class TreeSampler:
    """Samples a process and all its descendants: peak summed RSS and total CPU seconds."""

    def __init__(self, pid: int, interval_s: float = 0.2):
        self.root = psutil.Process(pid)
        self.interval_s = interval_s
        self.peak_rss = 0
        self.peak_pss = 0  # proportional: pages shared by forked workers counted once
        self.cpu_s: dict[int, float] = {}
        self.kind: dict[int, str] = {}
        self.peak_rss_by_kind: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        tick = 0
        while not self._stop.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            rss = pss = 0
            by_kind: dict[str, int] = {}
            for p in procs:
                try:
                    mem = p.memory_info().rss
                    if tick % 5 == 0:  # reading smaps is costly: PSS once a second
                        pss += p.memory_full_info().pss
                    t = p.cpu_times()
                    kind = self.kind[p.pid] = _kind(p)  # re-read: spark-submit execs java
                except psutil.NoSuchProcess:
                    continue
                rss += mem
                by_kind[kind] = by_kind.get(kind, 0) + mem
                self.cpu_s[p.pid] = t.user + t.system  # children are sampled themselves
            tick += 1
            self.peak_pss = max(self.peak_pss, pss)
            if rss > self.peak_rss:
                self.peak_rss, self.peak_rss_by_kind = rss, by_kind
            time.sleep(self.interval_s)

    @property
    def total_cpu_s(self) -> float:
        return sum(self.cpu_s.values())

    def cpu_by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, seconds in self.cpu_s.items():
            out[self.kind[pid]] = out.get(self.kind[pid], 0.0) + seconds
        return out


def _kind(p: psutil.Process) -> str:
    """jvm, python driver, or pyspark worker/daemon: where CPU and memory go."""
    cmd = " ".join(p.cmdline())
    if p.name() == "java" or "spark-submit" in cmd or "spark-class" in cmd:
        return "jvm"
    if "pyspark.worker" in cmd:
        return "python-task-workers"
    if "daemon" in cmd or "pyspark" in cmd:
        return "python-planner-workers"
    return "python-driver"


@dataclass(frozen=True)
class Commit:
    version: int
    timestamp_ms: int
    files: list[str]
    rows: int


def commits(table: Path | str) -> list[Commit]:
    """Each Delta log entry of a table (a local path or s3:// URI), read straight from
    _delta_log (no Delta library)."""
    out = []
    folder = Location(str(table)) / "_delta_log"
    for name in sorted(n for n in folder.names() if n.endswith(".json")):
        log = folder / name
        stamp, added, rows = 0, [], 0
        for line in log.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                stamp = action["commitInfo"]["timestamp"]
            if "add" in action:
                added.append(action["add"]["path"])
                rows += json.loads(action["add"]["stats"] or "{}").get("numRecords", 0)
        out.append(Commit(int(name.removesuffix(".json")), stamp, added, rows))
    return out


def wait_for(
    predicate: Callable[[], T | None], timeout_s: float, what: str, poll_s: float = 0.05
) -> T:
    """predicate's first true answer, asked every poll_s (streaming/polling.py's poll_until);
    TimeoutError naming `what` once timeout_s has passed."""
    return poll_until(
        lambda: predicate() or None,
        timeout_s=timeout_s,
        interval_s=poll_s,
        timeout_error=lambda _: TimeoutError(f"timed out after {timeout_s}s waiting for {what}"),
    )


def write_figures(out: Path | None, figures: dict) -> None:
    """Save a benchmark's figures as JSON, if asked to."""
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(figures, indent=2))


def state_cost(rows: int, updates_ms: float, gets: int, get_ms: float) -> dict[str, float]:
    """What a row costs the deduplication state (task time per 1,000 rows) and what a RocksDB get
    costs, from sums over some micro-batches: unlike a batch's duration, neither depends on the
    batches' sizes or on how close to saturation the stream runs."""
    return {
        "state_updates_ms_per_krow": 1000 * updates_ms / max(1, rows),
        "rocksdb_get_us": 1000 * get_ms / gets if gets else float("nan"),
    }


def drift(
    rows: list[dict[str, float]],
    settle_s: float,
    run_s: float,
    age_of: Mapping[str, str] | None = None,
) -> dict[str, dict]:
    """Per series: first-tenth and last-tenth medians, least-squares slope per hour, and the
    value at 30 days, over the samples (t_s: seconds into the run) after settle_s that no fault was
    being recovered from (recovering, where a benchmark injects faults). A series that age_of
    maps to an age column (seconds since its process started) also leaves out the samples of a
    process younger than settle_s: a process a fault restarted settles again."""
    age_of = age_of or {}
    kept = [r for r in rows if r["t_s"] >= settle_s and not r.get("recovering")]
    out: dict[str, dict] = {}
    if len(kept) < 10:
        return out
    for name in kept[0]:
        if name in ("t_s", "recovering") or name in age_of.values():
            continue
        age = age_of.get(name)
        settled = [r for r in kept if age is None or r.get(age, settle_s) >= settle_s]
        t_h = np.array([r["t_s"] for r in settled]) / 3600
        y = np.array([r.get(name, np.nan) for r in settled], dtype=float)
        ok = ~np.isnan(y)
        if ok.sum() < 10 or np.allclose(y[ok], 0):
            continue
        tenth = max(1, int(ok.sum()) // 10)
        slope, _ = np.polyfit(t_h[ok], y[ok], 1)
        median = float(np.median(y[ok]))
        first, last = y[ok][:tenth], y[ok][-tenth:]
        out[name] = {
            "first_tenth": float(np.median(first)),
            "last_tenth": float(np.median(last)),
            "slope_per_h": float(slope),
            "slope_pct_per_h": float(100 * slope / median) if median else float("nan"),
            "at_30_days": float(np.median(last) + slope * (30 * 24 - run_s / 3600)),
        }
    return out
