"""Validate one date partition of a flow's table with Great Expectations 1.x.

The partition is read through the Delta snapshot (delta-rs: the files of the current version,
never a listing of Parquet files), turned into pandas with Arrow-backed strings (zero-copy), and
validated in an ephemeral GX context against the flow's expectations plus two that hold for
every flow: the table has exactly the declared columns, and every event time lies inside the
partition's day.
"""

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import cache
from typing import Any

import pandas as pd
import pyarrow as pa

from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.flow.contract import contract_expectations
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.flow.table_schema import table_schema

_STRINGS = pd.StringDtype("pyarrow")
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
class PartitionValidation:
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


def read_partition(table_uri: str, flow: FlowSpec, day: str) -> pa.Table:
    """The rows of one date in the table's current snapshot."""
    return open_table(table_uri).to_pyarrow_table(partitions=[(flow.partition_column, "=", day)])


def validate_partition(table_uri: str, flow: FlowSpec, day: str) -> PartitionValidation:
    """Run the flow's contract and expectations, and the generic ones, on one date of its
    table."""
    import time

    import great_expectations as gx
    import great_expectations.expectations as gxe

    started = time.perf_counter()
    table = read_partition(table_uri, flow, day)
    frame = table.to_pandas(types_mapper={pa.string(): _STRINGS, pa.large_string(): _STRINGS}.get)
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
    suite = gx.ExpectationSuite(name=f"{flow.name}-{day}", expectations=expectations)
    batch = _batch_definition().get_batch(batch_parameters={"dataframe": frame})
    result = batch.validate(
        suite, result_format={"result_format": "SUMMARY", "partial_unexpected_count": _SAMPLE}
    )
    outcomes = sorted((_outcome(r) for r in result.results), key=lambda o: o.name)
    return PartitionValidation(day, table.num_rows, outcomes, time.perf_counter() - started)


@cache
def _batch_definition() -> Any:
    """One ephemeral GX context per process: in memory, no files, no progress bars."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return (
        context.data_sources.add_pandas("tidelake")
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
    """JSON-friendly: timestamps as ISO strings, numpy scalars as Python numbers, NA as None."""
    if value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, datetime | pd.Timestamp):
        return value.isoformat()
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
