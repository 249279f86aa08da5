"""A jar-free, exactly-once Delta sink for Structured Streaming: `format("tidelake-delta")`.

Executors write Parquet (delta_files); the driver commits each micro-batch as one Delta
transaction with delta-rs (delta_commit), keyed by query id and batch id so replays are no-ops.
With `quarantine.path`, rows whose `quarantine.when` column is not null go to a second table
(the flow's dead letters) instead; each table gets its own idempotent transaction.

Options: path (required), partitionBy, quarantine.path, quarantine.when (default "_error"),
quarantine.columns (default: the decoder's Kafka metadata, error and raw bytes),
compression (default zstd). Columns whose names start with "_" never reach the main table.

Batch writes (`df.write...mode("overwrite")`) replace whole partitions in one commit:
replacePartitions (comma-separated values of the one partitionBy column) and readVersion (the
snapshot whose files of those partitions are replaced; see delta_commit.replace_partitions).
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
    DataSourceArrowWriter,
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
    "replacepartitions",  # batch writes only
    "readversion",
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

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        """Batch writes replace partitions: mode("overwrite") with replacePartitions and
        readVersion (the snapshot whose files of those partitions are replaced)."""
        opts = {k.lower(): v for k, v in self.options.items()}
        plan = SinkPlan.from_options(dict(self.options), schema)
        if not overwrite:
            raise DeltaSinkOptionError('batch writes replace partitions: use mode("overwrite")')
        if len(plan.main.partition_by) != 1:
            raise DeltaSinkOptionError("option 'partitionBy' must name one column for a replace")
        values = [v.strip() for v in opts.get("replacepartitions", "").split(",") if v.strip()]
        if not values:
            raise DeltaSinkOptionError("option 'replacePartitions' is required (a,b,...)")
        try:
            read_version = int(opts["readversion"])
        except (KeyError, ValueError):
            raise DeltaSinkOptionError("option 'readVersion' must be a table version") from None
        return DeltaReplaceWriter(plan, values, read_version)


class DeltaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, plan: SinkPlan):
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DeltaCommitMessage:
        ctx = TaskContext.get()
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId") or -1)
        query_id = ctx.getLocalProperty("sql.streaming.queryId") or "unknown-query"
        prefix = f"part-{batch_id:06d}-{ctx.partitionId():04d}-{ctx.attemptNumber()}"
        main, quarantine = _write_task(self.plan, iterator, prefix)
        return DeltaCommitMessage(query_id, batch_id, main, quarantine)

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


class DeltaReplaceWriter(DataSourceArrowWriter):
    """Executors write files; the driver replaces the partitions with them in one commit."""

    def __init__(self, plan: SinkPlan, values: list[str], read_version: int):
        self.plan = plan
        self.values = values
        self.read_version = read_version

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DeltaCommitMessage:
        ctx = TaskContext.get()
        prefix = f"replace-v{self.read_version}-{ctx.partitionId():04d}-{ctx.attemptNumber()}"
        main, _ = _write_task(self.plan, iterator, prefix)
        return DeltaCommitMessage("replace", self.read_version, main, [])

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        from tidelake.streaming.delta_commit import replace_partitions  # driver only

        files = [f for m in messages if isinstance(m, DeltaCommitMessage) for f in m.main_files]
        result = replace_partitions(
            self.plan.main.uri,
            files,
            schema=self.plan.main.schema,
            partition_column=self.plan.main.partition_by[0],
            values=self.values,
            read_version=self.read_version,
        )
        log.info("replaced %s of %s: %s", self.values, self.plan.main.uri, result)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("replace of %s aborted; its files stay uncommitted", self.values)


def _write_task(
    plan: SinkPlan, iterator: Iterator[pa.RecordBatch], prefix: str
) -> tuple[list[DataFile], list[DataFile]]:
    """One task's rows as files of the main table and the quarantine (routed by plan)."""
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
        return main.close(), quarantine.close() if quarantine else []
    except BaseException:
        main.abort()
        if quarantine is not None:
            quarantine.abort()
        raise


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
