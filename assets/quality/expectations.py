"""Validate one date partition of a flow's table (or a whole use case's table) with Great
Expectations 1.x, on Spark.

The partition is read by Spark through the Delta log (the files of the current version, never a
listing of Parquet files) and validated in an ephemeral GX context with GX's Spark engine, so
that the check's memory does not grow with the day: a day of 6,000 events/s is 518 M rows,
which the pandas engine held in memory at ~1 GB per million rows (docs/benchmarks.md). The suite
is the flow's expectations plus two that hold for every flow: the table has exactly the declared
columns, and every event time lies inside the partition's day. Types are Spark's
(`ExpectColumnValuesToBeOfType(type_="LongType")`).
"""

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import cache
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tidelake.streaming.flow.contract import contract_expectations
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.flow.table_schema import table_schema
from tidelake.streaming.usecase.output import PARTITION_COLUMN

_SAMPLE = 5


@dataclass(frozen=True)
class ExpectationOutcome:
    """One expectation's verdict on one partition, as the UI shows it."""

    expectation: str
    column: str | None
    success: bool
    unexpected_count: int | None = None
    unexpected_percent: float | None = None
    sample: list[Any] = field(default_factory=list)
    observed: Any = None
    error: str | None = None

    @property
    def name(self) -> str:
        return f"{self.expectation}({self.column})" if self.column else self.expectation


@dataclass(frozen=True)
class Validation:
    """A suite's verdicts on a date of a table (`day`) or on a whole table (`day` empty)."""

    day: str
    rows: int
    outcomes: list[ExpectationOutcome]
    seconds: float

    @property
    def success(self) -> bool:
        return all(o.success for o in self.outcomes)

    @property
    def failures(self) -> list[ExpectationOutcome]:
        return [o for o in self.outcomes if not o.success]


def read_partition(spark: SparkSession, table_uri: str, flow: FlowSpec, day: str) -> DataFrame:
    """The rows of one date in the table's current snapshot, as a lazy Spark DataFrame."""
    table = spark.read.format("delta").load(table_uri)
    return table.where(F.col(flow.partition_column) == F.lit(day).cast("date"))


def validate_partition(spark: SparkSession, table_uri: str, flow: FlowSpec, day: str) -> Validation:
    """Run the flow's contract and expectations, and the generic ones, on one date of its
    table."""
    import time

    import great_expectations.expectations as gxe

    started = time.perf_counter()
    frame = read_partition(spark, table_uri, flow, day)
    start = datetime.combine(date.fromisoformat(day), datetime.min.time(), UTC)
    columns = [f.name for f in table_schema(flow) if not f.name.startswith("_")]
    since = [
        expectation
        for first, factory in flow.expectations_since.items()
        if date.fromisoformat(day) >= first
        for expectation in factory()
    ]
    expectations = [
        # not exact: the column of a field removed from the message stays (delta/evolution.py)
        gxe.ExpectTableColumnsToMatchSet(column_set=columns, exact_match=False),
        gxe.ExpectColumnValuesToBeBetween(
            column=flow.event_time_field,
            min_value=start,
            max_value=start + timedelta(days=1),
            strict_max=True,
        ),
        *contract_expectations(flow),
        *(flow.expectations() if flow.expectations else []),
        *since,
    ]
    outcomes = validate_frame(frame, expectations, f"{flow.name}-{day}")
    rows = frame.count()  # Delta answers from the log's statistics
    return Validation(day, rows, outcomes, time.perf_counter() - started)


def validate_table(
    spark: SparkSession, table_uri: str, expectations: list[Any], day: str = ""
) -> Validation:
    """Run expectations on a use case's table as it stands: the whole of it, or its `day` (a
    date of its `date` partition column)."""
    import time

    started = time.perf_counter()
    frame = spark.read.format("delta").load(table_uri)
    if day:
        frame = frame.where(F.col(PARTITION_COLUMN) == F.lit(day).cast("date"))
    suite = table_uri.rstrip("/").rsplit("/", 1)[-1] + (f"-{day}" if day else "")
    outcomes = validate_frame(frame, expectations, suite)
    return Validation(day, frame.count(), outcomes, time.perf_counter() - started)


def validate_frame(
    frame: DataFrame, expectations: list[Any], suite: str
) -> list[ExpectationOutcome]:
    """Great Expectations' verdicts on a Spark DataFrame, one per expectation, by name."""
    import great_expectations as gx

    batch = _batch_definition().get_batch(batch_parameters={"dataframe": frame})
    result = batch.validate(
        gx.ExpectationSuite(name=suite, expectations=expectations),
        result_format={"result_format": "SUMMARY", "partial_unexpected_count": _SAMPLE},
    )
    return sorted((_outcome(r) for r in result.results), key=lambda o: o.name)


@cache
def _batch_definition() -> Any:
    """One ephemeral GX context per process: in memory, no files, no progress bars. Each
    expectation's Spark job reads only its columns of the day."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return (
        # not persisted: GX would cache the whole day, never release it, and serve the next
        # read of the same table from that cache (a Delta relation compares equal across versions)
        context.data_sources.add_spark("tidelake", persist=False)
        .add_dataframe_asset("partition")
        .add_batch_definition_whole_dataframe("whole")
    )


def _outcome(r: Any) -> ExpectationOutcome:
    config, out, info = r.expectation_config, r.result or {}, r.exception_info or {}
    if "raised_exception" not in info:  # metric errors come nested per metric
        info = next(iter(info.values()), {}) if info else {}
    error = info.get("exception_message") if info.get("raised_exception") else None
    return ExpectationOutcome(
        expectation=config.type,
        column=config.kwargs.get("column"),
        success=bool(r.success),
        unexpected_count=out.get("unexpected_count"),
        unexpected_percent=out.get("unexpected_percent"),
        sample=[_plain(v) for v in out.get("partial_unexpected_list") or []],
        observed=_plain(out.get("observed_value")),
        error=error,
    )


def _plain(value: Any) -> Any:
    """JSON-friendly: timestamps and dates as ISO strings, numpy scalars as Python numbers.
    Spark hands timestamps over naive, in the session's time zone: UTC (spark/session.py)."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
