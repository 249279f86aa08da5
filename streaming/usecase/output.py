"""A use case's output as its table stores it: the function's DataFrame checked against the
declared kind and given the partition column (the UTC date of its time column), and an Upsert's
rows reduced to one per key. Every writer of a use case's table shapes its rows here."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, TimestampNTZType, TimestampType

from tidelake.streaming.delta.write import arrow_schema
from tidelake.streaming.flow.table_schema import COMMENT_KEY
from tidelake.streaming.usecase.spec import Append, Daily, Upsert, UseCaseError, UseCaseSpec

PARTITION_COLUMN = "date"
KEY_PROPERTY = "tidelake.use_case.key"
"""Table property recording an Upsert table's key, so that a changed key is refused."""
SEQUENCE_PROPERTY = "tidelake.use_case.sequence_by"


def shape_output(rows: object, use_case: UseCaseSpec, day: date | None = None) -> DataFrame:
    """The function's result as the table's rows (a Daily one's: of `day`); a UseCaseError
    naming the use case when it is not a DataFrame or lacks what its kind needs."""
    if not isinstance(rows, DataFrame):
        raise UseCaseError(
            f"use case {use_case.name}: its function returned {type(rows).__name__}, not a "
            "DataFrame"
        )
    output = use_case.output
    if isinstance(output, Append):
        _require_columns(rows, use_case, [output.time_column], "time_column")
        return _with_date(rows, use_case, output.time_column)
    if isinstance(output, Upsert):
        _require_columns(rows, use_case, list(output.key), "key")
        _require_columns(rows, use_case, [output.sequence_by], "sequence_by")
        _require_columns(rows, use_case, list(output.sums), "sums")
        return rows
    if isinstance(output, Daily):
        assert day is not None, "a Daily use case's output is shaped by day"
        if PARTITION_COLUMN in rows.columns:
            raise UseCaseError(
                f"use case {use_case.name}: its function's output for {day} has a column "
                f"{PARTITION_COLUMN!r}; the engine adds it (the day of the input it was given)"
            )
        return rows.withColumn(PARTITION_COLUMN, F.lit(day))
    raise AssertionError(output)


def function_rows(use_case: UseCaseSpec, given: DataFrame, day: date | None = None) -> DataFrame:
    """The use case's function on its input `given` (a Daily one's day `day`), its result
    shaped as the table's rows (shape_output)."""
    ((argument, _),) = use_case.inputs.items()
    return shape_output(use_case.call({argument: given}), use_case, day)


def stored_schema(use_case: UseCaseSpec, shaped: DataFrame) -> pa.Schema:
    """The schema of the table that stores shaped rows: an Upsert's after the reduction to one
    row per key (its sums' types), each column with its declared doc."""
    output = use_case.output
    stored = latest_per_key(shaped, output) if isinstance(output, Upsert) else shaped
    return table_arrow_schema(stored, use_case.columns)


def latest_per_key(rows: DataFrame, upsert: Upsert) -> DataFrame:
    """One row per key: the other columns of its newest row by sequence_by (ties broken by the
    other columns' values, so that any order of the same rows gives the same row), and the
    sums of the `sums` columns, in their own types."""
    key, sums = list(upsert.key), list(upsert.sums)
    latest = [upsert.sequence_by] + [
        c for c in rows.columns if c not in (*key, *sums, upsert.sequence_by)
    ]
    types = {f.name: f.dataType for f in rows.schema.fields}
    reduced = rows.groupBy(*[F.col(f"`{c}`") for c in key]).agg(
        F.max(F.struct(*[F.col(f"`{c}`") for c in latest])).alias("_latest"),
        *[F.sum(F.col(f"`{c}`")).cast(types[c]).alias(c) for c in sums],
    )
    return reduced.select(
        *[F.col(f"`{c}`") for c in key],
        *[F.col("_latest").getField(c).alias(c) for c in latest],
        *[F.col(f"`{c}`") for c in sums],
    ).select(*[F.col(f"`{c}`") for c in rows.columns])


def _with_date(rows: DataFrame, use_case: UseCaseSpec, column: str) -> DataFrame:
    kind = rows.schema[column].dataType
    if not isinstance(kind, TimestampType | TimestampNTZType | DateType):
        raise UseCaseError(
            f"use case {use_case.name}: its time column {column!r} is {kind.simpleString()}, "
            "not a timestamp (its UTC date is the table's partition)"
        )
    if PARTITION_COLUMN in rows.columns and column != PARTITION_COLUMN:
        rows = rows.drop(PARTITION_COLUMN)
    return rows.withColumn(PARTITION_COLUMN, F.to_date(F.col(f"`{column}`")))


def _require_columns(rows: DataFrame, use_case: UseCaseSpec, columns: list[str], role: str) -> None:
    missing = [c for c in columns if c not in rows.columns]
    if missing:
        raise UseCaseError(
            f"use case {use_case.name}: its function's output lacks its {role} column(s) "
            f"{missing} (it has {rows.columns})"
        )


def table_arrow_schema(rows: DataFrame, docs: Mapping[str, str]) -> pa.Schema:
    """The table's schema from its rows, each column with its declared doc as Delta's column
    comment."""
    schema = arrow_schema(rows)
    return pa.schema(
        [f.with_metadata({COMMENT_KEY: docs[f.name]}) if f.name in docs else f for f in schema]
    )
