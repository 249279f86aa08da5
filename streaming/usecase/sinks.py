"""Where a use case's micro-batches land, exactly once each.

- Append: Spark writes the batch's data files and the flows' own commit path appends them with
  the application transaction (app id of the query, version = batch id; delta/commit.py), so a
  replayed batch commits nothing. A row that breaks one of the table's CHECK constraints stops
  the use case, naming the constraint in the flows' wording (delta/constraints.py): the batch is
  not committed.
- Upsert: one delta-spark MERGE per batch into a table with deletion vectors (upsert_table.py),
  its rows first reduced to one per key (output.latest_per_key). The MERGE carries the same
  application transaction through Delta's
  idempotent-DML settings (spark.databricks.delta.write.txnAppId / txnVersion, delta-io/delta
  PR 1555), recorded in the MERGE's own commit: a batch replayed after a crash between the MERGE
  and Spark's checkpoint finds its version recorded and Delta skips the MERGE, so running totals
  never count a batch twice. delta-spark enforces the table's constraints itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from tidelake.streaming.delta.commit import (
    DeltaCommitError,
    batch_recorded,
    commit_files,
    current_constraints,
    ensure_table,
)
from tidelake.streaming.delta.constraints import violated_constraint
from tidelake.streaming.delta.files import write_data_files
from tidelake.streaming.delta.write import checkpoint_app_id
from tidelake.streaming.errors import TidelakeError
from tidelake.streaming.spark.session import session_settings
from tidelake.streaming.usecase.output import PARTITION_COLUMN, latest_per_key
from tidelake.streaming.usecase.spec import Upsert, UseCaseError, UseCaseSpec
from tidelake.streaming.usecase.upsert_table import merge_latest, prepare_upsert_table

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
APP_ID_WRITER = "use_case"


def prepare_table(
    spark: SparkSession, use_case: UseCaseSpec, table_uri: str, schema: pa.Schema
) -> DeltaTable:
    """The output table, created if missing (an Upsert one with deletion vectors,
    upsert_table.py); a table whose columns, partitioning or key the output no longer fits is
    refused, naming the use case (its table stays untouched)."""
    try:
        if isinstance(use_case.output, Upsert):
            return prepare_upsert_table(spark, use_case.output, table_uri, schema)
        return ensure_table(table_uri, schema, [PARTITION_COLUMN])
    except DeltaCommitError as exc:
        raise UseCaseError(
            f"use case {use_case.name}: its output does not fit its table: {exc}; change the "
            f"function back or rebuild the table (tidelake use-case refresh {use_case.name})"
        ) from None


@dataclass
class BatchSink:
    """What both sinks share: the error that abandoned a batch, and the query's application
    transaction id."""

    use_case: UseCaseSpec
    table_uri: str
    checkpoint: str
    failure: TidelakeError | None = field(default=None, init=False)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        try:
            self.write(batch, batch_id)
        except TidelakeError as exc:
            self.failure = exc
            raise

    @cached_property
    def app_id(self) -> str:
        """Read once from the checkpoint's metadata, which Spark writes before the first batch
        and never changes."""
        return checkpoint_app_id(self.checkpoint, APP_ID_WRITER)

    def write(self, batch: DataFrame, batch_id: int) -> None:
        raise NotImplementedError


@dataclass
class AppendSink(BatchSink):
    """foreachBatch of an Append use case."""

    schema: pa.Schema = field(kw_only=True)

    def write(self, batch: DataFrame, batch_id: int) -> None:
        txn = self.app_id
        if batch_recorded(self.table_uri, txn, batch_id):
            return
        constraints = current_constraints(self.table_uri)
        violated = violated_constraint(constraints)
        if violated is not None:  # one pass over the batch for all of them
            found = batch.select(violated.alias("v")).where("v IS NOT NULL").first()
            if found is not None:
                raise UseCaseError(f"use case {self.use_case.name}: a row {found['v']}")
        files = write_data_files(batch, self.table_uri, PARTITION_COLUMN, f"batch-{batch_id}")
        commit_files(
            self.table_uri,
            files,
            schema=self.schema,
            partition_by=[PARTITION_COLUMN],
            app_id=txn,
            version=batch_id,
            constraints=constraints,
        )


@dataclass
class UpsertSink(BatchSink):
    """foreachBatch of an Upsert use case: one idempotent MERGE of the batch's latest rows."""

    def write(self, batch: DataFrame, batch_id: int) -> None:
        from delta.tables import DeltaTable as SparkDeltaTable

        upsert = self.use_case.output
        assert isinstance(upsert, Upsert)
        session = batch.sparkSession
        rows = latest_per_key(batch, upsert)
        with session_settings(session, {TXN_APP_ID: self.app_id, TXN_VERSION: str(batch_id)}):
            merge_latest(SparkDeltaTable.forPath(session, self.table_uri), rows, upsert)
