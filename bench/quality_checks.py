"""Great Expectations on one 1,000,000-row date partition: how long the whole suite takes."""

from __future__ import annotations

import tempfile
import time
from datetime import UTC, date, datetime
from pathlib import Path

import click
import numpy as np
import pyarrow as pa
from common import write_figures
from deltalake import write_deltalake

from tidelake.assets.quality.expectations import validate_partition
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.flow.table_schema import table_schema

DAY = "2026-11-20"


def partition(rows: int) -> pa.Table:
    rng = np.random.default_rng(5)
    start_us = int(datetime(2026, 11, 20, tzinfo=UTC).timestamp() * 1_000_000)
    event_us = np.sort(start_us + rng.integers(0, 86_400_000_000, rows))
    hex_ids = [f"{v:032x}" for v in rng.integers(0, 2**62, rows, dtype=np.int64)]
    schema = pa.schema([f for f in table_schema(CALL_EVENTS) if not f.name.startswith("_")])
    columns = {
        "call_sid": pa.array([f"CA{h}" for h in hex_ids]),
        "account_sid": pa.array([f"AC{i % 25:032x}" for i in range(rows)]),
        "duration": pa.array(rng.integers(0, 3600, rows), pa.int64()),
        "call_state": pa.array(np.where(rng.random(rows) < 0.04, "failed", "completed")),
        "region": pa.array(rng.choice(["us1", "us2", "de1"], rows)),
        "event_time": pa.array(event_us, pa.timestamp("us", "UTC")),
        "date": pa.array([date.fromisoformat(DAY)] * rows, pa.date32()),
        "kafka_topic": pa.array(["call-events"] * rows),
        "kafka_partition": pa.array(np.arange(rows) % 4, pa.int32()),
        "kafka_offset": pa.array(np.arange(rows), pa.int64()),
        "kafka_timestamp": pa.array(event_us, pa.timestamp("us", "UTC")),
        "ingest_time": pa.array(event_us, pa.timestamp("us", "UTC")),
    }
    return pa.table([columns[f.name].cast(f.type) for f in schema], schema=schema)


@click.command()
@click.option("--rows", default=1_000_000, show_default=True)
@click.option("--out", type=click.Path(path_type=Path))
def main(rows: int, out: Path | None) -> None:
    with tempfile.TemporaryDirectory(prefix="tidelake-bench-") as tmp:
        uri = str(Path(tmp) / "call_events")
        write_deltalake(uri, partition(rows), partition_by=["date"])
        validate_partition(uri, CALL_EVENTS, DAY)  # warm: Great Expectations' lazy imports
        runs = []
        for _ in range(3):
            started = time.perf_counter()
            result = validate_partition(uri, CALL_EVENTS, DAY)
            runs.append(time.perf_counter() - started)
        assert result.success and result.rows == rows, result.failures
    best = min(runs)
    click.echo(
        f"{len(result.outcomes)} expectations on {rows:,} rows: best {best:.2f} s, "
        f"runs {', '.join(f'{r:.2f}' for r in runs)} s (read + to pandas + validate)"
    )
    write_figures(out, {"rows": rows, "expectations": len(result.outcomes), "seconds": runs})


if __name__ == "__main__":
    main()
