"""What a Daily use case's day costs: calls_by_region_daily over days of call_events of a given
size, made one by one (as automation makes them, in a Spark session already started), made
again (idempotent: the same table), and the full refresh of all days.

Reported per day: seconds to make it (read the input's day at one version, the function, the
exact percentiles, the day's files written and the replace committed) and input rows per second.

    python bench/daily_use_case.py --calls 2000000 --days 3
"""

from __future__ import annotations

import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import click
import numpy as np
import pyarrow as pa
from common import write_figures
from deltalake import write_deltalake

from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.calls.use_cases import CALLS_BY_REGION_DAILY
from tidelake.streaming.flow.table_schema import table_schema
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.spark.session import build_spark_session
from tidelake.streaming.usecase.daily import DaySource, build_day
from tidelake.streaming.usecase.refresh import refresh_daily

FIRST_DAY = date(2026, 11, 1)
REGIONS = np.array(["us1", "us2", "de1", "ie1", "au1", "jp1", "br1", "sg1"])


def day_of_calls(day: date, calls: int, seed: int) -> pa.Table:
    """`calls` call events of `day` with the table's columns (engine columns filled)."""
    rng = np.random.default_rng(seed)
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    offsets = rng.integers(0, 86_400_000_000, calls)
    times = pa.array(np.datetime64(start.replace(tzinfo=None), "us") + offsets.astype("m8[us]"))
    failed = rng.random(calls) < 0.1
    columns = {
        "call_sid": pa.array([f"CA{seed:08x}{n:024x}" for n in range(calls)]),
        "account_sid": pa.array([f"AC{n:032x}" for n in rng.integers(0, 50_000, calls)]),
        "duration": pa.array(np.where(failed, 0, rng.integers(1, 3600, calls))),
        "call_state": pa.array(np.where(failed, "failed", "completed")),
        "region": pa.array(REGIONS[rng.integers(0, len(REGIONS), calls)]),
        "event_time": times,
        "date": pa.array([day] * calls, pa.date32()),
    }
    schema = pa.schema([f for f in table_schema(CALL_EVENTS) if f.name in columns])
    return pa.table({f.name: columns[f.name].cast(f.type) for f in schema}, schema=schema)


@click.command()
@click.option("--calls", default=2_000_000, show_default=True, help="call events per day")
@click.option("--days", default=3, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=None)
def main(calls: int, days: int, out: Path | None) -> None:
    with tempfile.TemporaryDirectory(prefix="tidelake-daily-") as work:
        settings = EngineSettings(lake=Path(work) / "lake", checkpoints=Path(work) / "cp")
        dates = [FIRST_DAY + timedelta(days=n) for n in range(days)]
        for n, day in enumerate(dates):
            write_deltalake(
                settings.table_uri(CALL_EVENTS.table),
                day_of_calls(day, calls, n),
                partition_by=["date"],
                mode="append",
            )
        spark = build_spark_session("local[2]", app_name="bench-daily-use-case")
        source = DaySource(CALL_EVENTS, None)
        made = [build_day(spark, CALLS_BY_REGION_DAILY, source, settings, d) for d in dates]
        again = build_day(spark, CALLS_BY_REGION_DAILY, source, settings, dates[-1])
        started = time.monotonic()
        refreshed = list(
            refresh_daily(
                spark, CALLS_BY_REGION_DAILY, source, settings, today=dates[-1] + timedelta(days=1)
            )
        )
        refresh_s = time.monotonic() - started
        spark.stop()
    per_day = [round(b.seconds, 2) for b in made]
    figures = {
        "calls_per_day": calls,
        "days": days,
        "seconds_per_day": per_day,
        "seconds_made_again": round(again.seconds, 2),
        "calls_per_second_warm": round(calls / min(b.seconds for b in made[1:] or made)),
        "refresh_seconds": round(refresh_s, 2),
        "refresh_days": len(refreshed),
        "rows_per_day": [b.rows for b in made],
    }
    for key, value in figures.items():
        print(f"{key}: {value}")
    write_figures(out, figures)


if __name__ == "__main__":
    main()
