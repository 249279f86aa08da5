"""The flow plus one use case at a steady rate: does the use case keep up, how fresh is it, what
does each process cost.

Runs `tidelake stream call_events` and `tidelake stream account_activity` (an upsert, one MERGE
per micro-batch) as two processes on a fresh lake and topic while the demo producer sends
`--rate` events/s for `--minutes`. Reported: the peak RSS and CPU of each process tree, how
long after the producer stopped the flow's table and then the use case had everything, and the
use case's freshness read from the logs alone: for every input version with rows, the time from
its commit to the commit of the use case's batch that read it (the batch's end offset in the
use case's checkpoint; its commit found by the application transaction the MERGE records).
At the end, the use case's table: its live files and deletion vectors, its log's files, its auto
compactions, and the accounts that differ from a recomputation (read back by delta-spark).

    python bench/use_case_freshness.py --rate 2000 --minutes 10 [--one-application]

With --one-application both run as queries of one Spark application (issue 77).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import numpy as np
from common import TreeSampler, commits, kafka, wait_for, write_figures
from upsert_checks import differences, table_files

from tidelake.platform.dev.produce import produce_demo_events
from tidelake.platform.local.process_group import stop_group
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.calls.use_cases import ACCOUNT_ACTIVITY
from tidelake.streaming.kafka.admin import delete_topic, ensure_topic
from tidelake.streaming.spark.session import build_spark_session
from tidelake.streaming.storage.location import Location
from tidelake.streaming.usecase.position import committed_input_version, version_read
from tidelake.streaming.usecase.upsert_table import upsert_table_state

USE_CASE = ACCOUNT_ACTIVITY.name


def batch_ends(checkpoint: Path) -> dict[int, int]:
    """Batch id -> the newest input version it read in full (position.committed_input_version's
    rule, for every batch)."""
    ends = {}
    offsets = Location(str(checkpoint)) / "offsets"
    for name in (n for n in offsets.names() if n.isdigit()):
        read = version_read(json.loads((offsets / name).read_text().splitlines()[-1]))
        if read is not None:
            ends[int(name)] = read
    return ends


def transaction_commits(table: Path) -> dict[int, int]:
    """Batch id (its application transaction's version) -> commit time (ms) of the table."""
    out = {}
    folder = Location(str(table)) / "_delta_log"
    for name in sorted(n for n in folder.names() if n.endswith(".json")):
        stamp, batch = None, None
        for line in (folder / name).read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                stamp = action["commitInfo"]["timestamp"]
            if "txn" in action:
                batch = int(action["txn"]["version"])
        if stamp is not None and batch is not None:
            out.setdefault(batch, stamp)
    return out


def freshness_ms(lake: Path, checkpoint: Path) -> np.ndarray:
    """For each input version with rows: the use case's commit time of it minus its own."""
    inputs = {c.version: c for c in commits(lake / "call_events") if c.rows}
    committed = transaction_commits(lake / USE_CASE)
    out, previous = [], -1
    for batch, end in sorted(batch_ends(checkpoint).items()):
        if batch > 0 and previous == -1:  # the batches before it are gone: where it began too
            previous = end
            continue
        if batch in committed:
            out += [
                committed[batch] - inputs[v].timestamp_ms
                for v in range(previous + 1, end + 1)
                if v in inputs
            ]
        previous = max(previous, end)
    return np.array(out, dtype=float)


def end_state(lake: Path) -> dict[str, object]:
    """The upsert table once both streams stopped: what its writer keeps bounded (live files,
    deletion vectors, log files, auto compactions) and whether it equals a recomputation."""
    table_uri, input_uri = str(lake / USE_CASE), str(lake / "call_events")
    state = upsert_table_state(table_uri)
    spark = build_spark_session("local[2]")
    try:
        files = table_files(spark, table_uri)
        differing = differences(spark, input_uri, table_uri)
    finally:
        spark.stop()
    return {
        "table_version": state.table_version,
        "delta_log_files": state.delta_log_files,
        "auto_compactions_in_last_200_commits": state.auto_compactions,
        **files,
        "differences_from_recomputation": differing,
    }


def start(name: str, env: dict[str, str], *options: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "tidelake.platform.cli", "stream", name, *options]
    return subprocess.Popen(command, env=env, start_new_session=True)


@click.command()
@click.option("--rate", default=2000, show_default=True, help="Events per second.")
@click.option("--minutes", default=10.0, show_default=True, help="Minutes of traffic.")
@click.option(
    "--conf",
    "use_case_conf",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Spark setting of the use case's process, to compare; repeatable.",
)
@click.option(
    "--one-application",
    is_flag=True,
    help="Run the use case as a query of the flow's Spark application (`tidelake stream "
    "call_events --use-cases`) instead of a process of its own.",
)
@click.option("--out", type=click.Path(path_type=Path), help="Also write the figures as JSON.")
def main(
    rate: int,
    minutes: float,
    use_case_conf: tuple[str, ...],
    one_application: bool,
    out: Path | None,
) -> None:
    """The flow and account_activity at a steady rate: keeping up, freshness, RSS."""
    with kafka() as conf, tempfile.TemporaryDirectory(prefix="tidelake-use-case-") as tmp:
        lake, checkpoints = Path(tmp) / "lake", Path(tmp) / "checkpoints"
        delete_topic(conf, CALL_EVENTS.topic)
        ensure_topic(conf, CALL_EVENTS.topic, CALL_EVENTS.topic_partitions)
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": conf["bootstrap.servers"],
            "TIDELAKE_LAKE": str(lake),
            "TIDELAKE_CHECKPOINTS": str(checkpoints),
            "TIDELAKE_LOG_LEVEL": "WARNING",
        }
        # every batch's offsets kept (Spark keeps 100): each input version is measured
        kept = {"spark.sql.streaming.minBatchesToRetain": "1000000"}
        kept |= dict(item.split("=", 1) for item in use_case_conf)
        if one_application:
            flow = start(
                CALL_EVENTS.name, env | {"TIDELAKE_SPARK_CONF": json.dumps(kept)}, "--use-cases"
            )
        else:
            flow = start(CALL_EVENTS.name, env)
        use_case = None
        try:
            with TreeSampler(flow.pid, interval_s=1.0) as flow_sampler:
                log = lake / "call_events" / "_delta_log"
                wait_for(lambda: log.exists() or None, 300, "the flow's table", poll_s=0.5)
                if not one_application:
                    use_case = start(USE_CASE, env | {"TIDELAKE_SPARK_CONF": json.dumps(kept)})
                with (
                    TreeSampler(use_case.pid, interval_s=1.0)
                    if use_case is not None
                    else contextlib.nullcontext()
                ) as use_case_sampler:
                    report = produce_demo_events(
                        CALL_EVENTS,
                        conf,
                        rate=rate,
                        duration_s=minutes * 60,
                        malformed_share=0.0,
                        late_share=0.0,
                        seed=3,
                        progress=sys.stderr.isatty(),
                    )
                    produced_at = time.monotonic()
                    wait_for(
                        lambda: sum(c.rows for c in commits(lake / "call_events")) >= report.good,
                        300,
                        "every event in call_events",
                        poll_s=0.5,
                    )
                    table_behind_s = time.monotonic() - produced_at
                    last_input = commits(lake / "call_events")[-1].version
                    checkpoint = checkpoints / ACCOUNT_ACTIVITY.checkpoint_name
                    wait_for(
                        lambda: (committed_input_version(str(checkpoint)) or 0) >= last_input,
                        300,
                        f"{USE_CASE} past input version {last_input}",
                        poll_s=0.5,
                    )
                    use_case_behind_s = time.monotonic() - produced_at
        finally:
            for proc in (use_case, flow):
                if proc is not None:
                    stop_group(proc, 90, leader_only=True)
        fresh = freshness_ms(lake, checkpoint)
        table = end_state(lake)
    figures: dict[str, object] = {
        "rate": rate,
        "minutes": minutes,
        "use_case_conf": list(use_case_conf),
        "one_application": one_application,
        "events": report.good,
        "achieved_rate": report.rate,
        "flow_peak_rss_mb": flow_sampler.peak_rss / 2**20,
        "flow_cpu_s": flow_sampler.total_cpu_s,
        "use_case_peak_rss_mb": use_case_sampler.peak_rss / 2**20 if use_case_sampler else 0.0,
        "use_case_cpu_s": use_case_sampler.total_cpu_s if use_case_sampler else 0.0,
        "table_caught_up_after_producer_s": table_behind_s,
        "use_case_caught_up_after_producer_s": use_case_behind_s,
        "input_versions_measured": len(fresh),
        "freshness_p50_ms": float(np.percentile(fresh, 50)),
        "freshness_p99_ms": float(np.percentile(fresh, 99)),
        "freshness_max_ms": float(fresh.max()),
        **table,
    }
    click.echo(
        f"{report.good:,} events at {report.rate:,.0f}/s over {minutes:g} min; call_events "
        f"caught up {table_behind_s:.1f} s and {USE_CASE} {use_case_behind_s:.1f} s after the "
        f"producer stopped\n"
        f"{USE_CASE} freshness (input commit -> its commit) over {len(fresh)} input versions: "
        f"p50 {figures['freshness_p50_ms']:,.0f} ms (target <= 2000), p99 "
        f"{figures['freshness_p99_ms']:,.0f} ms (target <= 5000), max "
        f"{figures['freshness_max_ms']:,.0f} ms\n"
        f"peak RSS: flow {figures['flow_peak_rss_mb']:,.0f} MB, {USE_CASE} "
        f"{figures['use_case_peak_rss_mb']:,.0f} MB; CPU: flow {figures['flow_cpu_s']:,.0f} s, "
        f"{USE_CASE} {figures['use_case_cpu_s']:,.0f} s"
        f"{' (one application: the use case is in the flow figures)' if one_application else ''}\n"
        f"{USE_CASE}'s table at the end: version {table['table_version']:,}, "
        f"{table['files']} live files ({table['files_with_deletion_vector']} with a deletion "
        f"vector), {table['delta_log_files']} files in its log, "
        f"{table['auto_compactions_in_last_200_commits']} auto compactions in its last 200 "
        f"commits; differences from a recomputation (read by delta-spark): "
        f"{table['differences_from_recomputation'] or 'none'}"
    )
    write_figures(out, figures)


if __name__ == "__main__":
    main()
