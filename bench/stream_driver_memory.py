"""The stream's Python driver over thousands of small micro-batches: does its memory grow with
the batches it has run?

The soak (bench/soak/) saw the driver's RSS grow 7-8 %/h at 6,000 events/s without saying why.
This probe runs CallEvent's stream in its own process (run_flow_stream, as `tidelake stream`
does, progress log on as in the soak) on a private broker, fed at a low rate so that batches are
small and many, with tracemalloc on. Every --sample-s it records the driver's RSS, what Python
has allocated (tracemalloc), pyarrow's pool, the live objects and threads, and the JVM's RSS.
At the end it prints, after the warm-up, the first-tenth and last-tenth medians and the slope
of each series per hour and per 1,000 batches, and the Python allocations that grew most
between a snapshot after the warm-up and the last one.

With --store s3 the lake and the checkpoints are on the local S3 server (SeaweedFS): delta-rs
then reads the table's log over HTTP, not through tokio's blocking pool as on local disk.

    python bench/stream_driver_memory.py --minutes 20 --rate 200 [--store s3]
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import click
import psutil
import pyarrow as pa
from common import drift, kafka, lake_env, thread_names, wait_for, write_figures

from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.kafka.admin import delete_topic, ensure_topic
from tidelake.streaming.stream.progress_log import progress_file
from tidelake.streaming.stream.query import stream_name

FLOW = CALL_EVENTS


def _produce(conf: dict[str, str], rate: float, duration_s: float) -> None:
    from tidelake.platform.dev.produce import produce_demo_events

    produce_demo_events(
        FLOW,
        conf,
        rate=rate,
        duration_s=duration_s,
        malformed_share=0.001,
        late_share=0.05,
        duplicate_share=0.01,
        seed=7,
        progress=False,
    )


def _jvm_rss(me: psutil.Process) -> int:
    total = 0
    for child in me.children(recursive=True):
        try:
            if child.name() == "java":
                total += child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def _thread_names() -> dict[str, int]:
    """The driver's threads by name (Python's and native ones alike, as the kernel lists them),
    digits folded so that a pool's threads count as one name."""
    folded: Counter[str] = Counter()
    for name, count in thread_names().items():
        folded["".join("#" if c.isdigit() else c for c in name)] += count
    return dict(folded.most_common())


def _batches(progress: Path) -> int:
    files = progress.parent.glob(progress.name + "*")  # the rotated files too
    return sum(1 for f in files for _ in f.open(encoding="utf-8"))


SERIES = {
    "rss_mb": "the driver's RSS (MB)",
    "traced_mb": "Python's allocations, tracemalloc (MB)",
    "arrow_mb": "pyarrow's memory pool (MB)",
    "objects_k": "live Python objects (thousands)",
    "threads": "the driver's threads",
    "jvm_rss_mb": "the stream's JVM RSS (MB)",
}


@click.command()
@click.option("--minutes", type=click.FloatRange(min=2), default=20.0, show_default=True)
@click.option("--warm-up-minutes", type=click.FloatRange(min=0), default=3.0, show_default=True)
@click.option("--rate", type=click.FloatRange(min=1), default=200.0, show_default=True)
@click.option("--sample-s", type=click.FloatRange(min=1), default=10.0, show_default=True)
@click.option("--top", type=click.IntRange(min=1), default=12, show_default=True)
@click.option("--store", type=click.Choice(["local", "s3"]), default="local", show_default=True)
@click.option("--out", type=click.Path(path_type=Path))
def main(
    minutes: float,
    warm_up_minutes: float,
    rate: float,
    sample_s: float,
    top: int,
    store: str,
    out: Path | None,
) -> None:
    tracemalloc.start(8)
    me = psutil.Process()
    with (
        kafka() as conf,
        tempfile.TemporaryDirectory(prefix="tidelake-driver-") as tmp,
        lake_env(store, Path(tmp)) as store_env,
    ):
        work = Path(tmp)
        os.environ |= store_env | {"TIDELAKE_PROGRESS_LOG": str(work / "progress")}
        from tidelake.streaming.settings import load_engine_settings
        from tidelake.streaming.stream.runner import run_flow_stream

        delete_topic(conf, FLOW.topic)
        ensure_topic(conf, FLOW.topic, FLOW.topic_partitions)
        progress = progress_file(work / "progress", stream_name(FLOW))
        producer = multiprocessing.get_context("spawn").Process(
            target=_produce, args=(conf, rate, minutes * 60 + 120), daemon=True
        )
        producer.start()
        stop = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                run_flow_stream(FLOW, load_engine_settings(), conf, stop=stop)
            except BaseException as exc:  # reported below, with the figures so far
                failure.append(exc)

        stream = threading.Thread(target=run, name="stream", daemon=True)
        stream.start()
        wait_for(lambda: progress.exists() or failure, 600, "the first micro-batch", poll_s=1.0)
        started = time.monotonic()
        samples: list[dict[str, float]] = []
        baseline: tracemalloc.Snapshot | None = None
        while time.monotonic() - started < minutes * 60 and not failure:
            time.sleep(sample_s)
            gc.collect()
            t = time.monotonic() - started
            sample = {
                "t_s": t,
                "batches": float(_batches(progress)),
                "rss_mb": me.memory_info().rss / 2**20,
                "traced_mb": tracemalloc.get_traced_memory()[0] / 2**20,
                "arrow_mb": pa.total_allocated_bytes() / 2**20,
                "objects_k": len(gc.get_objects()) / 1000,
                "threads": float(me.num_threads()),
                "jvm_rss_mb": _jvm_rss(me) / 2**20,
            }
            samples.append(sample)
            print(json.dumps({k: round(v, 1) for k, v in sample.items()}), flush=True)
            if baseline is None and t >= warm_up_minutes * 60:
                baseline = tracemalloc.take_snapshot()
        last = tracemalloc.take_snapshot()
        threads_at_end = _thread_names()
        stop.set()
        stream.join(timeout=180)
        producer.terminate()
    if failure:
        raise failure[0]
    settled = [s for s in samples if s["t_s"] >= warm_up_minutes * 60]
    batches = settled[-1]["batches"] - settled[0]["batches"]
    hours = (settled[-1]["t_s"] - settled[0]["t_s"]) / 3600
    figures: dict[str, Any] = {
        "rate": rate,
        "minutes": minutes,
        "store": store,
        "batches_settled": batches,
    }
    print(
        f"\n{batches:,.0f} micro-batches in {hours * 60:.1f} settled minutes at {rate:.0f}/s, "
        f"lake on {store}"
    )
    drifts = drift(samples, warm_up_minutes * 60, minutes * 60)
    for key, what in SERIES.items():
        if key not in drifts:  # fewer than 10 samples, or zero throughout
            continue
        d = drifts[key]
        per_k = d["slope_per_h"] * hours / batches * 1000 if batches else float("nan")
        figures[key] = d | {"per_1000_batches": per_k}
        print(
            f"{what}: {d['first_tenth']:,.1f} -> {d['last_tenth']:,.1f}; "
            f"{d['slope_per_h']:+,.2f}/h ({d['slope_pct_per_h']:+.1f} %/h), "
            f"{per_k:+,.3f} per 1,000 batches"
        )
    figures["threads_by_name"] = threads_at_end
    print(f"the driver's threads at the end, by name: {threads_at_end}")
    if baseline is not None:
        print(f"\nPython allocations that grew most after the warm-up (top {top}):")
        growth = last.compare_to(baseline, "traceback")[:top]
        figures["growth"] = []
        for stat in growth:
            frames = [f"{f.filename}:{f.lineno}" for f in stat.traceback][-4:]
            figures["growth"].append({"kib": stat.size_diff / 1024, "count": stat.count_diff})
            print(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  {frames[-1]}")
            for frame in reversed(frames[:-1]):
                print(f"{'':34}<- {frame}")
    write_figures(out, figures)


if __name__ == "__main__":
    main()
