"""The soak's command: the platform started, fed and sampled until --minutes have passed, faults
injected from a thread of their own, then the tables read back and the summary written."""

from __future__ import annotations

import csv
import json
import multiprocessing
import signal
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import click
import numpy as np
from common import wait_for, write_figures

from soak.aged_state import seed_aged_state
from soak.batches import BatchReader, batch_figures
from soak.faults import FAULTS, FaultRecord, run_fault
from soak.figures import SETTLE_OPTION, plot
from soak.platform import REPO, Soak, fed_flow, platform, produce, read_back
from soak.processes import ProcessSampler
from soak.storage import storage_figures
from soak.summary import print_summary, summarize
from tidelake.streaming.settings import EngineSettings

CATCH_UP_TIMEOUT_S = 1200
"""How long the stream has to read what the producer wrote once it is done."""


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
        try:
            caught_up = wait_for(lambda: soak.lag() == 0, CATCH_UP_TIMEOUT_S, "the lag", poll_s=2)
        except TimeoutError:
            caught_up = False
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
    plot(rows, [f.at_s for f in faults], out_dir / "soak.png")
    write_figures(out_dir / "soak.json", summary)
    print_summary(summary)
    print(f"wrote {out_dir / 'soak.csv'}, soak.png, soak.json; the platform's files: {work}")
    if summary["lost"] or summary["duplicated"] or summary["quarantine_mismatch"]:
        sys.exit(1)


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"soak: {signal.Signals(signum).name}")


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
