"""One use case's always-on query: its input table streamed, its function applied, its output
shaped and landed by its sink (sinks.py), under a checkpoint of its own.

`UseCaseStream` has the shape of a flow's `FlowStream` (preflight, start, explain_failure,
batch_error), so the same always-on job, supervisor and `tidelake stream` run either; a
use case's stream is one query, which a later Spark application can host beside others.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from tidelake.streaming.errors import TidelakeError
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.usecase.inputs import input_version, stream_input
from tidelake.streaming.usecase.output import function_rows, stored_schema
from tidelake.streaming.usecase.refresh import take_refresh
from tidelake.streaming.usecase.sinks import AppendSink, BatchSink, UpsertSink, prepare_table
from tidelake.streaming.usecase.spec import Upsert, UseCaseSpec, failure_line

log = logging.getLogger(__name__)


def stream_job_name(use_case: UseCaseSpec) -> str:
    """The name of its query, its Dagster job and its STREAM_TAG value."""
    return f"use_case_{use_case.name}"


@dataclass
class UseCaseStream:
    """Builds and runs the streaming query of one use case."""

    use_case: UseCaseSpec
    flow: FlowSpec
    """The flow whose table is its input."""
    settings: EngineSettings
    sink: BatchSink | None = field(default=None, init=False)

    @property
    def query_name(self) -> str:
        return stream_job_name(self.use_case)

    @property
    def table_uri(self) -> str:
        return self.settings.table_uri(self.use_case.table)

    @property
    def input_uri(self) -> str:
        return self.settings.table_uri(self.flow.table)

    @property
    def checkpoint(self) -> str:
        return self.settings.checkpoint_uri(self.use_case.checkpoint_name)

    def preflight(self) -> None:
        """Fail fast, before Spark starts: storage that cannot be written, no input table."""
        self.settings.require_usable_storage()
        self.require_input()

    def require_input(self) -> None:
        """InputMissingError unless the input table exists."""
        input_version(self.use_case, self.input_uri, f"flow {self.flow.name}")

    def start(self, spark: SparkSession) -> StreamingQuery:
        """Start the query (after a full refresh when one was requested, refresh.py); a
        UseCaseError (naming the use case) if its function raises or its output does not fit
        its table, before anything is written; InputMissingError before its input exists."""
        self.require_input()
        if take_refresh(self.use_case, self.settings):
            log.info("%s: full refresh: table and checkpoint deleted", self.query_name)
        rows = stream_input(spark, self.input_uri, self.flow, self.use_case)
        shaped = function_rows(self.use_case, rows)
        schema = stored_schema(self.use_case, shaped)
        prepare_table(spark, self.use_case, self.table_uri, schema)
        output = self.use_case.output
        if isinstance(output, Upsert):
            self.sink = UpsertSink(self.use_case, self.table_uri, self.checkpoint)
        else:
            self.sink = AppendSink(self.use_case, self.table_uri, self.checkpoint, schema=schema)
        log.info(
            "starting %s: %s -> %s (%s), trigger %s",
            self.query_name,
            self.input_uri,
            self.table_uri,
            self.use_case.kind,
            self.use_case.trigger_interval,
        )
        return (
            shaped.writeStream.foreachBatch(self.sink)
            .queryName(self.query_name)
            .outputMode("append")
            .option("checkpointLocation", self.checkpoint)
            .trigger(processingTime=self.use_case.trigger_interval)
            .start()
        )

    def explain_failure(self, message: str) -> str:
        return failure_line(self.use_case, message)

    def batch_error(self) -> TidelakeError | None:
        """Why the query's last batch was abandoned, if tidelake raised it (sinks.py)."""
        return None if self.sink is None else self.sink.failure
