"""End-to-end latency of the always-on stream, and what an idle stream costs.

Runs `tidelake stream call_events` continuously, produces events at a steady rate, and for
every event measures (commit time of the Delta version that made it visible) - (its Kafka
produce timestamp). Prints p50/p90/p99/max and the stream's CPU while idle.

Runs of the same code on this 2-core machine differed by 5-6x (p50 3.9 to 23.6 s), so it
measures several runs, each with a new stream on a new lake and topic, and prints each run and
the median of every figure.

    python bench/engine_latency.py --rate 5000 --duration 60 --runs 3
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np
import psutil
import pyarrow.parquet as pq
from common import commits, kafka, wait_for, write_figures

from tidelake.platform.dev.produce import produce_demo_events
from tidelake.platform.local.process_group import stop_group
from tidelake.platform.local.s3_server import LocalS3Server
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.kafka.admin import delete_topic, ensure_topic
from tidelake.streaming.storage.location import filesystem


def _tree_cpu_s(pid: int) -> float:
    root = psutil.Process(pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            continue
    return total


WARM_UP_S = 10.0
"""Seconds of load after which the figures are also given apart."""


def _latencies_ms(
    table: str, after_version: int
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, float]]]:
    """Every event's latency and produce time (ms), and (version, rows, worst latency) of each
    commit."""
    out, produced, by_commit = [], [], []
    fs, root = filesystem(table)
    for c in commits(table):
        if c.version <= after_version:
            continue
        for path in c.files:
            produced_us = pq.read_table(
                f"{root}/{path}", columns=["kafka_timestamp"], filesystem=fs
            ).column(0)
            produced.append(produced_us.cast("int64").to_numpy() / 1000)
            out.append(c.timestamp_ms - produced[-1])
        if c.files:
            worst = max(float(x.max()) for x in out[-len(c.files) :])
            by_commit.append((c.version, c.rows, worst))
    if not out:
        return np.array([]), np.array([]), by_commit
    return np.concatenate(out), np.concatenate(produced), by_commit


@dataclass(frozen=True)
class Load:
    """What one measurement does: events a second for `duration` s, after `idle` s of an idle
    stream, under this trigger interval (None: the engine's)."""

    rate: int
    duration: float
    idle: float
    trigger: str | None


def measure(conf: dict, lake: str, checkpoints: str, extra_env: dict[str, str], load: Load) -> dict:
    """Run the stream on a fresh topic into this lake; produce at the rate; the figures."""
    rate, duration, idle, trigger = load.rate, load.duration, load.idle, load.trigger
    delete_topic(conf, CALL_EVENTS.topic)
    ensure_topic(conf, CALL_EVENTS.topic, CALL_EVENTS.topic_partitions)
    env = {
        **os.environ,
        **extra_env,
        "KAFKA_BOOTSTRAP_SERVERS": conf["bootstrap.servers"],
        "TIDELAKE_LAKE": lake,
        "TIDELAKE_CHECKPOINTS": checkpoints,
        "TIDELAKE_LOG_LEVEL": "WARNING",
    }
    if trigger:
        env["TIDELAKE_TRIGGER_INTERVAL"] = trigger
    table = f"{lake}/call_events"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidelake.platform.cli", "stream", "call_events"],
        env=env,
        start_new_session=True,
    )
    try:
        warm = produce_demo_events(CALL_EVENTS, conf, count=100, seed=1, progress=False)
        wait_for(lambda: sum(c.rows for c in commits(table)) >= warm.good, 180, "warm-up")
        warm_version = commits(table)[-1].version
        time.sleep(3)
        cpu0 = _tree_cpu_s(proc.pid)
        time.sleep(idle)
        idle_core_share = (_tree_cpu_s(proc.pid) - cpu0) / idle

        report = produce_demo_events(
            CALL_EVENTS,
            conf,
            rate=rate,
            duration_s=duration,
            malformed_share=0.0,
            late_share=0.0,
            seed=2,
            progress=sys.stderr.isatty(),
        )
        expected = warm.good + report.good
        wait_for(lambda: sum(c.rows for c in commits(table)) >= expected, 120, "all events")
    finally:
        stop_group(proc, 60, leader_only=True)  # the driver stops the query gracefully
    lat, produced, by_commit = _latencies_ms(table, warm_version)
    # the first seconds of load run code the JIT has not compiled yet (the warm-up was 100
    # events): also the figures once it has
    warm = lat[produced >= produced.min() + WARM_UP_S * 1000] if len(lat) else lat
    batches = len([c for c in commits(table) if c.version > warm_version and c.rows])
    assert len(lat) == report.good, (len(lat), report.good)
    return {
        "events": report.good,
        "achieved_rate": report.rate,
        "delta_versions": batches,
        "p50_ms": float(np.percentile(lat, 50)),
        "p90_ms": float(np.percentile(lat, 90)),
        "p99_ms": float(np.percentile(lat, 99)),
        "max_ms": float(lat.max()),
        # nan when the load was shorter than the warm-up
        "after_warm_up_p50_ms": float(np.percentile(warm, 50)) if len(warm) else float("nan"),
        "after_warm_up_p99_ms": float(np.percentile(warm, 99)) if len(warm) else float("nan"),
        "idle_cpu_core_share": idle_core_share,
        # where the tail comes from: the slowest commits, in the order the stream made them
        "worst_commits": sorted(sorted(by_commit, key=lambda c: -c[2])[:5], key=lambda c: c[0]),
        "first_version": by_commit[0][0] if by_commit else None,
    }


MEDIAN_OF = (
    "achieved_rate",
    "delta_versions",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "max_ms",
    "after_warm_up_p50_ms",
    "after_warm_up_p99_ms",
    "idle_cpu_core_share",
)


def measure_runs(
    runs: int, lake_root: str, conf: dict, extra_env: dict[str, str], load: Load
) -> dict:
    """`runs` measurements, each on a lake of its own under lake_root: the median of each
    figure in MEDIAN_OF, the rest from the run of median p50, the runs themselves under "runs"."""
    each = [
        measure(
            conf, f"{lake_root}/run-{i}/lake", f"{lake_root}/run-{i}/checkpoints", extra_env, load
        )
        for i in range(runs)
    ]
    for i, figures in enumerate(each, 1):
        click.echo(
            f"  run {i}: p50 {figures['p50_ms']:.0f} ms, p99 {figures['p99_ms']:.0f} ms, "
            f"idle CPU {figures['idle_cpu_core_share']:.1%}"
        )
    median = {key: float(np.median([f[key] for f in each])) for key in MEDIAN_OF}
    # the figures that have no median (the slowest commits) come from the run of median p50
    median_run = sorted(each, key=lambda f: f["p50_ms"])[len(each) // 2]
    return {**median_run, **median, "runs": each}


def _print(where: str, figures: dict) -> None:
    click.echo(
        f"{where}: {figures['events']:,} events at {figures['achieved_rate']:,.0f}/s in "
        f"{figures['delta_versions']:.0f} Delta versions"
    )
    click.echo(
        f"  latency p50 {figures['p50_ms']:.0f} ms (target <= 500), "
        f"p90 {figures['p90_ms']:.0f} ms, p99 {figures['p99_ms']:.0f} ms (target <= 1000), "
        f"max {figures['max_ms']:.0f} ms"
    )
    click.echo(
        f"  after the first {WARM_UP_S:.0f} s of load: p50 "
        f"{figures['after_warm_up_p50_ms']:.0f} ms, p99 {figures['after_warm_up_p99_ms']:.0f} ms"
    )
    click.echo(f"  idle stream CPU: {figures['idle_cpu_core_share']:.1%} of one core")
    click.echo(
        f"  slowest commits (version - {figures['first_version']} under load: rows, worst ms): "
        + ", ".join(
            f"#{v - figures['first_version']}: {rows:,}, {worst:.0f}"
            for v, rows, worst in figures["worst_commits"]
        )
    )


@click.command()
@click.option("--rate", default=5000, show_default=True, help="Events per second.")
@click.option("--duration", default=60.0, show_default=True, help="Seconds of traffic.")
@click.option("--idle", default=20.0, show_default=True, help="Seconds to measure idle CPU.")
@click.option("--trigger", default=None, help="Trigger interval, e.g. '250 milliseconds'.")
@click.option(
    "--also-on-s3",
    is_flag=True,
    help="Measure again with the lake and checkpoints on a local S3 server.",
)
@click.option(
    "--runs",
    default=3,
    show_default=True,
    help="Measurements, each with a new stream; the figures are their medians.",
)
@click.option("--out", type=click.Path(path_type=Path), help="Also write the figures as JSON.")
def main(
    rate: int,
    duration: float,
    idle: float,
    trigger: str | None,
    also_on_s3: bool,
    runs: int,
    out: Path | None,
) -> None:
    """Produce at a steady rate into a running stream; print latency percentiles and idle CPU."""
    if runs < 1:
        raise click.BadParameter("must be at least 1", param_hint="--runs")
    load = Load(rate, duration, idle, trigger)
    with kafka() as conf, tempfile.TemporaryDirectory(prefix="tidelake-latency-") as tmp:
        click.echo(f"local disk, {runs} run(s):")
        figures = measure_runs(runs, tmp, conf, {}, load)
        _print(f"local disk, median of {runs}", figures)
        if also_on_s3:
            with LocalS3Server() as s3:
                os.environ.update(s3.env())  # this process reads the lake's log too
                click.echo(f"lake and checkpoints on S3, {runs} run(s):")
                on_s3 = measure_runs(runs, s3.uri("latency"), conf, s3.env(), load)
            figures["s3"] = on_s3
            _print(
                f"lake and checkpoints on S3 (SeaweedFS on this machine), median of {runs}", on_s3
            )
    write_figures(out, figures)


if __name__ == "__main__":
    main()
