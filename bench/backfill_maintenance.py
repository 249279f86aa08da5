"""Backfill and compaction benchmark: one day of N events (default 1,000,000).

Streams the day with small micro-batches (many small files, as a live stream leaves them),
times reads of the day, compacts it, times the reads again, then backfills the day from Kafka.
Prints events/s of the backfill next to the stream's ingest rate (this run, and the engine
benchmark's steady state from bench-results/throughput.json if present).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import click
from common import kafka, write_figures
from deltalake import DeltaTable

from tidelake.platform.dev.produce import produce_demo_events
from tidelake.streaming.batch.backfill import plan_backfill, run_backfill
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.delta.maintenance import compact_partition
from tidelake.streaming.kafka.admin import ensure_topic
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.spark.session import build_spark_session
from tidelake.streaming.stream.query import FlowStream, await_query


def read_seconds(uri: str, day: str, repeats: int = 3) -> dict[str, float]:
    """Median time to read one day: DuckDB aggregate scan, and delta-rs into Arrow."""
    import duckdb
    import duckdb_extension_delta

    extension = next(Path(duckdb_extension_delta.__file__).parent.rglob("*.duckdb_extension"))
    duck, arrow = [], []
    for _ in range(repeats):
        con = duckdb.connect()
        con.load_extension(str(extension))
        started = time.perf_counter()
        con.sql(
            f"select count(*), sum(duration) from delta_scan('{uri}') where date = '{day}'"
        ).fetchall()
        duck.append(time.perf_counter() - started)
        con.close()
        started = time.perf_counter()
        DeltaTable(uri).to_pyarrow_table(partitions=[("date", "=", day)])
        arrow.append(time.perf_counter() - started)
    return {"duckdb_s": statistics.median(duck), "deltars_arrow_s": statistics.median(arrow)}


@click.command()
@click.option("--events", default=1_000_000, show_default=True)
@click.option("--stream-batch", default=20_000, show_default=True, help="maxOffsetsPerTrigger")
@click.option("--out", type=click.Path(path_type=Path))
def main(events: int, stream_batch: int, out: Path | None) -> None:
    with kafka() as conf, tempfile.TemporaryDirectory(prefix="tidelake-bench-") as tmp:
        ensure_topic(conf, CALL_EVENTS.topic, CALL_EVENTS.topic_partitions)
        report = produce_demo_events(
            CALL_EVENTS, conf, count=events, malformed_share=0, late_share=0, seed=3,
            progress=sys.stderr.isatty(),
        )  # fmt: skip
        (day,) = report.by_date
        settings = EngineSettings(
            lake=Path(tmp) / "lake",
            checkpoints=Path(tmp) / "cp",
            max_offsets_per_trigger=stream_batch,
        )
        spark = build_spark_session("local[2]", {}, "tidelake-bench")
        stream = FlowStream(CALL_EVENTS, settings, conf)
        started = time.perf_counter()
        await_query(stream.start(spark, available_now=True), threading.Event())
        stream_s = time.perf_counter() - started

        before = read_seconds(stream.table_uri, day)
        compaction = compact_partition(stream.table_uri, "date", day)
        after = read_seconds(stream.table_uri, day)

        started = time.perf_counter()
        plan = plan_backfill(CALL_EVENTS, [day], settings, conf)
        plan_s = time.perf_counter() - started
        result = run_backfill(spark, plan, settings, conf)
        backfill_s = time.perf_counter() - started
        assert result.rows == report.good, (result.rows, report.good)
        spark.stop()

    engine = Path(__file__).parents[1] / "bench-results" / "throughput.json"
    engine_steady = (
        json.loads(engine.read_text())["tidelake"]["steady_events_per_s"]
        if engine.exists()
        else None
    )
    figures = {
        "events": report.good,
        "stream_events_per_s": report.good / stream_s,
        "stream_s": stream_s,
        "engine_benchmark_steady_events_per_s": engine_steady,
        "backfill_events_per_s": plan.records / backfill_s,
        "backfill_s": backfill_s,
        "backfill_plan_s": plan_s,
        "files_before": compaction.before.files,
        "files_after": compaction.after.files,
        "bytes_before": compaction.before.bytes,
        "bytes_after": compaction.after.bytes,
        "compaction_s": compaction.seconds,
        "read_before": before,
        "read_after": after,
    }
    lines = [
        ("backfill of one day", f"{figures['backfill_events_per_s']:,.0f} ev/s",
         f"{report.good:,} events in {backfill_s:.1f} s (plan {plan_s:.2f} s)"),
        ("stream ingest, this run", f"{figures['stream_events_per_s']:,.0f} ev/s",
         f"{stream_batch:,}-event batches, {stream_s:.1f} s incl. start-up"),
        ("stream steady, engine bench", f"{engine_steady:,.0f} ev/s" if engine_steady else "n/a",
         "make bench-throughput"),
        ("compaction", f"{compaction.seconds:.1f} s",
         f"{compaction.before.files} -> {compaction.after.files} files, "
         f"{compaction.before.bytes / 1e6:.1f} -> {compaction.after.bytes / 1e6:.1f} MB"),
        ("read day, DuckDB", f"{before['duckdb_s']:.3f} -> {after['duckdb_s']:.3f} s",
         f"speed-up {before['duckdb_s'] / after['duckdb_s']:.1f}x"),
        ("read day, delta-rs Arrow", f"{before['deltars_arrow_s']:.3f} -> "
         f"{after['deltars_arrow_s']:.3f} s",
         f"speed-up {before['deltars_arrow_s'] / after['deltars_arrow_s']:.1f}x"),
    ]  # fmt: skip
    for name, value, note in lines:
        click.echo(f"{name:<30}{value:>22}   {note}")
    write_figures(out, figures)


if __name__ == "__main__":
    main()
