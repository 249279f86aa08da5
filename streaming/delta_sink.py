"""A jar-free, exactly-once Delta sink for Structured Streaming: `format("tidelake-delta")`.

Executors write Parquet (delta_files); the driver commits each micro-batch as one Delta
transaction with delta-rs (delta_commit), keyed by query id and batch id so replays are no-ops.
With `quarantine.path`, rows whose `quarantine.when` column is not null go to a second table
(the flow's dead letters) instead; each table gets its own idempotent transaction.

Options: path (required), partitionBy, quarantine.path, quarantine.when (default "_error"),
quarantine.columns (default: the decoder's Kafka metadata, error and raw bytes),
compression (default zstd). Columns whose names start with "_" never reach the main table.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from tidelake.streaming.decode import ERROR_COLUMN, QUARANTINE_SOURCE_COLUMNS, TIMESTAMP
from tidelake.streaming.delta_files import DataFile, PartitionedParquetWriter

log = logging.getLogger(__name__)

_OPTIONS = {
    "path",
    "partitionby",
    "quarantine.path",
    "quarantine.when",
    "quarantine.columns",
    "compression",
    "checkpointlocation",  # passed through by Spark
    "queryname",
}


class DeltaSinkOptionError(ValueError):
    """An option of the Delta sink is missing or wrong; the message names it."""


@dataclass(frozen=True)
class TableLayout:
    """Where one of the sink's tables lives and which columns it keeps."""

    uri: str
    schema: pa.Schema  # columns in the table, partition columns included
    source_columns: tuple[str, ...]  # columns of the incoming batch, in table order
    partition_by: tuple[str, ...]


@dataclass(frozen=True)
class SinkPlan:
    main: TableLayout
    quarantine: TableLayout | None
    route_column: str | None
    compression: str

    @classmethod
    def from_options(cls, options: dict[str, str], schema: StructType) -> SinkPlan:
        opts = {k.lower(): v for k, v in options.items()}
        unknown = sorted(set(opts) - _OPTIONS)
        if unknown:
            raise DeltaSinkOptionError(
                f"unknown option(s) {unknown} for format tidelake-delta; known: {sorted(_OPTIONS)}"
            )
        if not opts.get("path"):
            raise DeltaSinkOptionError("option 'path' (the Delta table location) is required")
        arrow = _utc(to_arrow_schema(schema, timezone="UTC"))
        partition_by = tuple(c.strip() for c in opts.get("partitionby", "").split(",") if c.strip())
        for column in partition_by:
            if column not in arrow.names:
                raise DeltaSinkOptionError(f"option 'partitionBy' names unknown column {column!r}")
        main_cols = tuple(n for n in arrow.names if not n.startswith("_"))
        main = TableLayout(
            opts["path"], pa.schema([arrow.field(n) for n in main_cols]), main_cols, partition_by
        )
        if not opts.get("quarantine.path"):
            return cls(main, None, None, opts.get("compression", "zstd"))
        route = opts.get("quarantine.when", ERROR_COLUMN)
        wanted = opts.get("quarantine.columns")
        q_cols = (
            tuple(c.strip() for c in wanted.split(",")) if wanted else QUARANTINE_SOURCE_COLUMNS
        )
        q_cols = tuple(dict.fromkeys((*q_cols, *partition_by)))
        for column in (route, *q_cols):
            if column not in arrow.names:
                raise DeltaSinkOptionError(
                    f"quarantine column {column!r} is not in the stream's columns {arrow.names}"
                )
        q_schema = pa.schema([arrow.field(n).with_name(n.lstrip("_")) for n in q_cols])
        quarantine = TableLayout(opts["quarantine.path"], q_schema, q_cols, partition_by)
        return cls(main, quarantine, route, opts.get("compression", "zstd"))


def _utc(schema: pa.Schema) -> pa.Schema:
    """Spark hands timestamps as "Etc/UTC", which delta-rs rejects: use "UTC"."""
    return pa.schema(
        [f.with_type(TIMESTAMP) if pa.types.is_timestamp(f.type) else f for f in schema]
    )


@dataclass
class DeltaCommitMessage(WriterCommitMessage):
    query_id: str
    batch_id: int
    main_files: list[DataFile]
    quarantine_files: list[DataFile]


class DeltaSinkDataSource(DataSource):
    """`format("tidelake-delta")`."""

    @classmethod
    def name(cls) -> str:
        return "tidelake-delta"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return DeltaStreamWriter(SinkPlan.from_options(dict(self.options), schema))


class DeltaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, plan: SinkPlan):
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DeltaCommitMessage:
        ctx = TaskContext.get()
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId") or -1)
        query_id = ctx.getLocalProperty("sql.streaming.queryId") or "unknown-query"
        prefix = f"part-{batch_id:06d}-{ctx.partitionId():04d}-{ctx.attemptNumber()}"
        plan = self.plan
        main = _writer(plan.main, prefix, plan.compression)
        quarantine = _writer(plan.quarantine, prefix, plan.compression) if plan.quarantine else None
        try:
            for batch in iterator:
                table = pa.Table.from_batches([batch])
                errors = table[plan.route_column] if quarantine is not None else None
                if errors is not None and errors.null_count < table.num_rows:
                    routed = pc.is_valid(errors)
                    quarantine.write(_project(table.filter(routed), plan.quarantine))
                    table = table.filter(pc.invert(routed))
                main.write(_project(table, plan.main))
            return DeltaCommitMessage(
                query_id, batch_id, main.close(), quarantine.close() if quarantine else []
            )
        except BaseException:
            main.abort()
            if quarantine is not None:
                quarantine.abort()
            raise

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        from tidelake.streaming.delta_commit import commit_files  # driver only: see module doc

        done = [m for m in messages if isinstance(m, DeltaCommitMessage)]
        if not done:
            return
        app_id = f"tidelake-{done[0].query_id}"
        layouts = [(self.plan.quarantine, [f for m in done for f in m.quarantine_files])]
        layouts.append((self.plan.main, [f for m in done for f in m.main_files]))
        for layout, files in layouts:
            if layout is None or not files:
                continue
            result = commit_files(
                layout.uri,
                files,
                schema=layout.schema,
                partition_by=layout.partition_by,
                app_id=app_id,
                version=batchId,
            )
            log.info("batch %s -> %s: %s", batchId, layout.uri, result)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Uncommitted files are invisible to readers; vacuum removes them later."""
        log.warning("batch %s aborted; its written files stay uncommitted", batchId)


def _writer(layout: TableLayout, prefix: str, compression: str) -> PartitionedParquetWriter:
    return PartitionedParquetWriter(
        layout.uri, layout.schema, layout.partition_by, file_prefix=prefix, compression=compression
    )


def _project(table: pa.Table, layout: TableLayout) -> pa.Table:
    columns = [table[c] for c in layout.source_columns]
    return pa.Table.from_arrays(
        [
            c.cast(f.type) if c.type != f.type else c
            for c, f in zip(columns, layout.schema, strict=True)
        ],
        schema=layout.schema,
    )
