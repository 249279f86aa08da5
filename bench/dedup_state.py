"""Deduplication at the size of a real day: one stream's micro-batches before and after it holds
a backlog's keys.

Runs `tidelake stream call_events` on a private broker, every micro-batch recorded by its
progress log (TIDELAKE_PROGRESS_LOG), in three phases:
1. live: --rate events/s for --live-minutes, on an empty state;
2. backlog: the stream is stopped (SIGTERM, as an outage or a deploy stops it), --backlog events
   with distinct keys are produced (default 30 M: a 2,000/s peak held for the 4 hours a key
   lives at CallEvent's 2 h lateness), and the restarted stream catches up on them; every one of
   those keys is still held afterwards;
3. live again at the same rate for --live-minutes.

Prints the median micro-batch of each live phase (the first minute of each left out: JIT and
caches) and their ratio, the backlog's rate over its first and last million rows, per-batch
state figures (eviction time and keys expired, the state's memory, RocksDB reads and writes),
and the peak RSS of the stream's processes.

    python bench/dedup_state.py --backlog 30000000 --rate 2000 --live-minutes 5
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from common import TreeSampler, kafka, state_cost, wait_for, write_figures

from tidelake.platform.dev.produce import produce_demo_events
from tidelake.platform.local.process_group import stop_group
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.kafka.admin import delete_topic, ensure_topic
from tidelake.streaming.stream.progress_log import progress_file
from tidelake.streaming.stream.query import stream_name
from tidelake.streaming.stream.status import committed_batch, kafka_ends, stream_lag

FLOW = CALL_EVENTS
WARM_UP_S = 60.0
MILLION = 1_000_000


def _produce_share(conf: dict[str, str], count: int, seed: int) -> int:
    report = produce_demo_events(
        FLOW, conf, count=count, malformed_share=0, late_share=0, seed=seed, progress=False
    )
    return report.good


def produce_backlog(conf: dict[str, str], total: int, processes: int) -> float:
    """Produce total events with distinct keys from several processes; returns seconds."""
    started = time.monotonic()
    shares = [total // processes + (1 if i < total % processes else 0) for i in range(processes)]
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        pool.starmap(_produce_share, [(conf, n, 1000 + i) for i, n in enumerate(shares)])
    return time.monotonic() - started


class Stream:
    """`tidelake stream call_events` as a process of its own, with its progress log."""

    def __init__(self, work: Path, conf: dict[str, str]):
        self.progress = progress_file(work / "progress", stream_name(FLOW))
        self.checkpoint = work / "checkpoints" / FLOW.name
        self.conf = conf
        self.env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": conf["bootstrap.servers"],
            "TIDELAKE_LAKE": str(work / "lake"),
            "TIDELAKE_CHECKPOINTS": str(work / "checkpoints"),
            "TIDELAKE_PROGRESS_LOG": str(work / "progress"),
            "TIDELAKE_LOG_LEVEL": "WARNING",
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> int:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tidelake.platform.cli", "stream", FLOW.name],
            env=self.env,
            start_new_session=True,
        )
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is None:
            return
        stop_group(self.proc, 120, leader_only=True)  # the driver stops the query gracefully
        self.proc = None

    def lag(self) -> int:
        done = committed_batch(str(self.checkpoint), FLOW.topic)
        return stream_lag(kafka_ends(self.conf, FLOW.topic), done.offsets if done else {}).total

    def batches(self) -> list[dict[str, Any]]:
        lines = self.progress.read_text().splitlines() if self.progress.exists() else []
        return [_batch(json.loads(line)) for line in lines]


def _batch(progress: dict[str, Any]) -> dict[str, Any]:
    state = (progress.get("stateOperators") or [{}])[0]
    metrics = state.get("customMetrics") or {}
    return {
        "at": datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp(),
        "rows": int(progress["numInputRows"]),
        "ms": int(progress["durationMs"]["triggerExecution"]),
        # eviction: Spark's dropDuplicatesWithinWatermark reports it as removals, a
        # transformWithState processor as timer processing (its TTL cleanup is there)
        "eviction_ms": int(state.get("allRemovalsTimeMs", 0))
        + int(metrics.get("timerProcessingTimeMs", 0)),
        "keys_expired": int(metrics.get("numValuesRemovedDueToTTLExpiry", 0))
        + int(state.get("numRowsRemoved", 0)),
        "updates_ms": int(state.get("allUpdatesTimeMs", 0)),
        "state_memory_mb": int(state.get("memoryUsedBytes", 0)) / 2**20,
        "state_rows": int(state.get("numRowsTotal", 0)),
        "rocksdb_gets": int(metrics.get("rocksdbGetCount", 0)),
        "rocksdb_get_ms": int(metrics.get("rocksdbGetLatency", 0)),
        "rocksdb_puts": int(metrics.get("rocksdbPutCount", 0)),
        "commit_ms": float((progress.get("tidelake") or {}).get("commit_ms", 0.0)),
    }


def live(conf: dict[str, str], stream: Stream, rate: float, minutes: float, seed: int) -> tuple:
    """Produce at rate for minutes; the batches that started after the warm-up, in that time."""
    started = time.time()
    produce_demo_events(
        FLOW,
        conf,
        rate=rate,
        duration_s=minutes * 60,
        malformed_share=0,
        late_share=0,
        duplicate_share=0.01,
        seed=seed,
        progress=False,
    )
    ended = time.time()
    wait_for(lambda: stream.lag() == 0, 600, "the stream to catch up", poll_s=1.0)
    return [b for b in stream.batches() if started + WARM_UP_S <= b["at"] <= ended and b["rows"]]


def backlog_rates(batches: list[dict[str, Any]]) -> tuple[float, float]:
    """Rows per second of the batches that read the backlog's first and last million rows."""

    def rate(part: list[dict[str, Any]]) -> float:
        return sum(b["rows"] for b in part) / (sum(b["ms"] for b in part) / 1000)

    first, last, seen = [], [], 0
    total = sum(b["rows"] for b in batches)
    for b in batches:
        if seen < MILLION:
            first.append(b)
        if seen + b["rows"] > total - MILLION:
            last.append(b)
        seen += b["rows"]
    return rate(first), rate(last)


def phase_state_cost(batches: list[dict[str, Any]]) -> dict[str, float]:
    """common.state_cost over a phase's batches."""
    return state_cost(
        rows=sum(b["rows"] for b in batches),
        updates_ms=sum(b["updates_ms"] for b in batches),
        gets=sum(b["rocksdb_gets"] for b in batches),
        get_ms=sum(b["rocksdb_get_ms"] for b in batches),
    )


def _median(batches: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(b[key] for b in batches)) if batches else float("nan")


@click.command()
@click.option("--backlog", type=click.IntRange(min=2 * MILLION), default=30 * MILLION)
@click.option("--rate", type=click.FloatRange(min=1), default=2000.0, show_default=True)
@click.option("--live-minutes", type=click.FloatRange(min=2), default=5.0, show_default=True)
@click.option("--producers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--out", type=click.Path(path_type=Path))
def main(backlog: int, rate: float, live_minutes: float, producers: int, out: Path | None) -> None:
    with kafka() as conf, tempfile.TemporaryDirectory(prefix="tidelake-dedup-") as tmp:
        delete_topic(conf, FLOW.topic)
        ensure_topic(conf, FLOW.topic, FLOW.topic_partitions)
        stream = Stream(Path(tmp), conf)
        sampler = TreeSampler(stream.start(), interval_s=1.0)
        with sampler:
            first = live(conf, stream, rate, live_minutes, seed=1)
        stream.stop()
        produce_s = produce_backlog(conf, backlog, producers)
        print(f"backlog: {backlog:,} events produced in {produce_s:.0f} s", flush=True)
        before = len(stream.batches())
        caught_up_at = time.monotonic()
        with TreeSampler(stream.start(), interval_s=1.0) as catch_up:
            wait_for(lambda: stream.lag() == 0, 7200, "the backlog", poll_s=2.0)
            caught_up_s = time.monotonic() - caught_up_at
            catching = [b for b in stream.batches()[before:] if b["rows"]]
            second = live(conf, stream, rate, live_minutes, seed=2)
        stream.stop()
    first_rate, last_rate = backlog_rates(catching)
    figures = {
        "rate": rate,
        "backlog": backlog,
        "live_first": {k: _median(first, k) for k in first[0]} | {"batches": len(first)},
        "live_second": {k: _median(second, k) for k in second[0]} | {"batches": len(second)},
        "batch_ratio": _median(second, "ms") / _median(first, "ms"),
        "state_cost": {
            "live_first": phase_state_cost(first),
            "live_second": phase_state_cost(second),
        },
        "backlog_seconds": caught_up_s,
        "backlog_first_million_rows_per_s": first_rate,
        "backlog_last_million_rows_per_s": last_rate,
        "backlog_rate_ratio": last_rate / first_rate,
        "backlog_batches": len(catching),
        "backlog_max_eviction_ms": max(b["eviction_ms"] for b in catching),
        "backlog_last_state_memory_mb": catching[-1]["state_memory_mb"],
        "peak_rss_mb": max(sampler.peak_rss, catch_up.peak_rss) / 2**20,
        "peak_rss_by_kind_mb": {
            k: v / 2**20
            for k, v in max(sampler, catch_up, key=lambda s: s.peak_rss).peak_rss_by_kind.items()
        },
    }
    for phase in ("live_first", "live_second"):
        f = figures[phase]
        print(
            f"{phase}: median micro-batch {f['ms']:.0f} ms of {f['rows']:.0f} rows ({f['batches']} "
            f"batches); eviction {f['eviction_ms']:.0f} ms, updates {f['updates_ms']:.0f} ms, "
            f"state memory {f['state_memory_mb']:.0f} MB, commit {f['commit_ms']:.0f} ms"
        )
    print(f"second / first live micro-batch: {figures['batch_ratio']:.2f} (target <= 1.1)")
    for phase, cost in figures["state_cost"].items():
        print(
            f"{phase}: state updates {cost['state_updates_ms_per_krow']:.1f} ms per 1,000 rows, "
            f"RocksDB get {cost['rocksdb_get_us']:.1f} us"
        )
    print(
        f"backlog: {backlog:,} rows in {caught_up_s:.0f} s ({len(catching)} batches); first "
        f"million {first_rate:,.0f} rows/s, last {last_rate:,.0f} rows/s, ratio "
        f"{figures['backlog_rate_ratio']:.2f} (target >= 0.9); longest eviction "
        f"{figures['backlog_max_eviction_ms']} ms; state memory at the end "
        f"{figures['backlog_last_state_memory_mb']:.0f} MB"
    )
    print(
        f"peak RSS of the stream's processes: {figures['peak_rss_mb']:,.0f} MB "
        f"{ {k: round(v) for k, v in figures['peak_rss_by_kind_mb'].items()} } (target <= 3072)"
    )
    write_figures(out, figures)


if __name__ == "__main__":
    main()
