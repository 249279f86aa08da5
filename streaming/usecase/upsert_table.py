"""An Upsert use case's table: keyed, unpartitioned, changed by one delta-spark MERGE per batch.

Its MERGE writes what changed, whatever the table holds: the table has deletion vectors on, so a
MERGE marks the rows it replaces in a small vector per file it touches and writes only the
batch's rows, instead of copying every other row of each file that holds a matched key (with
keys spread at random, every file: at 1,000,000 keys a batch of 3,000 events copied the whole
table). Its files stay few: auto compaction, delta-spark's post-commit hook, compacts them in
the MERGE's own thread once 50 small ones gather (their deletion vectors applied), so it never
races the MERGE; delta-spark's checkpoints (every delta.checkpointInterval versions) cut its log
to tidelake's log retention. docs/design.md has the measurements. delta-rs only reads the
table's metadata (1.6 cannot read the rows of a table with deletion vectors).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyspark.sql import DataFrame, SparkSession

from tidelake.streaming.delta.commit import (
    DeltaCommitError,
    create_table,
    require_fit,
    table_properties,
)
from tidelake.streaming.delta.tables import open_table, table_sql
from tidelake.streaming.storage.location import Location
from tidelake.streaming.usecase.output import KEY_PROPERTY, SEQUENCE_PROPERTY
from tidelake.streaming.usecase.spec import Upsert

log = logging.getLogger(__name__)

DELETION_VECTORS = "delta.enableDeletionVectors"
AUTO_COMPACT = "delta.autoOptimize.autoCompact"
UPSERT_TABLE_PROPERTIES = {DELETION_VECTORS: "true", AUTO_COMPACT: "true"}
"""What an upsert table has beside tidelake's table properties (delta/commit.py)."""


def prepare_upsert_table(
    spark: SparkSession, upsert: Upsert, table_uri: str, schema: pa.Schema
) -> DeltaTable:
    """Create the table if missing; refuse one keyed otherwise or that `schema` does not fit
    (DeltaCommitError); set what it lacks of its key, tidelake's table properties and
    UPSERT_TABLE_PROPERTIES through delta-spark in one commit (a table made before deletion
    vectors is so upgraded in place, its rows untouched)."""
    try:
        table = open_table(table_uri, without_files=True)
    except TableNotFoundError:
        table = create_table(table_uri, schema, [])
    have = table.metadata().configuration
    declared = {KEY_PROPERTY: ",".join(upsert.key), SEQUENCE_PROPERTY: upsert.sequence_by}
    for prop, value in declared.items():
        if have.get(prop, value) != value:
            raise DeltaCommitError(
                f"{table_uri} is keyed as {prop}={have[prop]!r}, the declaration says {value!r}"
            )
    require_fit(table, schema, [])
    wanted = {**declared, **table_properties(), **UPSERT_TABLE_PROPERTIES}
    changed = {k: v for k, v in wanted.items() if have.get(k) != v}
    if changed:
        set_table_properties(spark, table_uri, changed)
        if DELETION_VECTORS not in have:
            log.info("%s: upgraded in place to deletion vectors and auto compaction", table_uri)
        table = open_table(table_uri, without_files=True)
    return table


def set_table_properties(spark: SparkSession, table_uri: str, properties: dict[str, str]) -> None:
    """ALTER TABLE ... SET TBLPROPERTIES through delta-spark (which adds the table features
    they need to its protocol: deletion vectors' reader and writer feature)."""
    assignments = ", ".join(f"'{_quoted(k)}' = '{_quoted(v)}'" for k, v in properties.items())
    spark.sql(f"ALTER TABLE {table_sql(table_uri)} SET TBLPROPERTIES ({assignments})")


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def merge_latest(target: object, rows: DataFrame, upsert: Upsert) -> None:
    """MERGE rows (one per key) into target: a newer row by sequence_by replaces the stored
    one's columns, sums are added, a new key is inserted."""
    key, sums = list(upsert.key), list(upsert.sums)
    latest = [upsert.sequence_by] + [
        c for c in rows.columns if c not in (*key, *sums, upsert.sequence_by)
    ]

    def ordered(side: str) -> str:
        return f"struct({', '.join(f'{side}.`{c}`' for c in latest)})"

    newer = f"{ordered('s')} > {ordered('t')}"
    assignments = {f"`{c}`": f"CASE WHEN {newer} THEN s.`{c}` ELSE t.`{c}` END" for c in latest}
    assignments.update({f"`{c}`": f"t.`{c}` + s.`{c}`" for c in sums})
    condition = " AND ".join(f"t.`{c}` = s.`{c}`" for c in key)
    (
        target.alias("t")  # type: ignore[attr-defined]
        .merge(rows.alias("s"), condition)
        .whenMatchedUpdate(set=assignments)
        .whenNotMatchedInsertAll()
        .execute()
    )


RECENT_COMMITS = 200
"""Commits of an upsert table whose operations upsert_table_state reads (a few minutes of a
stream's MERGEs: auto compaction runs about every 25-50 of them)."""


@dataclass(frozen=True)
class UpsertTableState:
    """What an upsert table's writer keeps bounded, as the hourly upkeep observes it."""

    table_version: int
    live_files: int
    delta_log_files: int
    auto_compactions: int
    """OPTIMIZE commits among the last RECENT_COMMITS."""


def upsert_table_state(table_uri: str) -> UpsertTableState:
    """The table's live files, its log's files and its recent auto compactions (delta-rs reads
    the log; the rows it cannot read are not needed)."""
    table = open_table(table_uri)
    recent = table.history(limit=RECENT_COMMITS)
    return UpsertTableState(
        table_version=table.version(),
        live_files=len(table.file_uris()),
        delta_log_files=len((Location(table_uri) / "_delta_log").names()),
        auto_compactions=sum(1 for c in recent if c.get("operation") == "OPTIMIZE"),
    )
