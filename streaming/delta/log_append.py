"""A stream's batch as the next version of a Delta log, written without listing the log.

delta-rs (1.6) lists `_delta_log` twice for each commit: the latest version before writing, the
snapshot's update after it. On S3 a listing starts after a version; on local disk object_store
walks the whole folder, so there a commit cost what the log retention keeps: 3.7-4.8x a new
table's at one commit a second and a 1-hour retention, 45x at 24 hours (docs/benchmarks.md,
issue 38). A stream knows the version it appends after, so it creates the next one only if it
is absent (storage/conditional_put.py, as delta-rs does), and when another writer got there
first it reads the versions that follow by name, one file each, up to the first that does not
exist. Delta's rule for a blind append says what in them concerns it: its own application
transaction (the batch is in already), a protocol change (features this writer must know) and
a metadata change (the table it wrote for); added and removed files do not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from tidelake.streaming.delta.files import DataFile
from tidelake.streaming.errors import SetupError
from tidelake.streaming.storage.conditional_put import put_if_absent
from tidelake.streaming.storage.location import Location
from tidelake.streaming.storage.uri import join

ENGINE_INFO = "tidelake"

BLIND_APPEND_WRITER_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "timestampNtz",
        "deletionVectors",
        "vacuumProtocolCheck",
        "checkConstraints",
    }
)
"""Writer features whose tables take a plain add action (writer version 7). Others ask of each
write what this one does not do (row tracking's row ids, in-commit timestamps, column mapping's
physical names, generated and identity columns). `invariants` (and writer version 2) asks to
enforce the columns' `delta.invariants`, which a stream does not: a table whose columns carry any
is refused (require_no_invariants). `checkConstraints` (and writer version 3) asks to check each
row against the table's CHECK constraints, which the stream and the backfill do
(delta/constraints.py: a violating row is quarantined, never written)."""
LEGACY_WRITER_VERSION = 3
"""The highest writer version before features whose appends are plain: 2 invariants and
appendOnly, 3 CHECK constraints (4 adds change data feed and generated columns)."""

INVARIANTS_KEY = "delta.invariants"

PATH_SAFE = "/!$&'()+,;=:@"
"""What an add action's path keeps unescaped: the path is a URI (PROTOCOL.md), so the `%` of a
partition folder's escaped value and a space are percent-encoded; these, delta-rs's choice too,
are not."""


class UnsupportedTableError(SetupError):
    """The table's protocol asks for writer features a stream's append does not implement: a
    table to change or replace before the stream can write to it."""


def require_blind_appends(protocol: Mapping[str, Any], table_uri: str) -> None:
    """Raise UnsupportedTableError unless the stream's appends are valid under `protocol` (a
    Delta protocol action: minWriterVersion, writerFeatures)."""
    writer = int(protocol.get("minWriterVersion", 1))
    features = set(protocol.get("writerFeatures") or ())
    if writer <= LEGACY_WRITER_VERSION or (
        writer == 7 and features <= BLIND_APPEND_WRITER_FEATURES
    ):
        return
    asks = sorted(features - BLIND_APPEND_WRITER_FEATURES) or [f"writer version {writer}"]
    raise UnsupportedTableError(
        f"{table_uri} needs writer features a stream does not implement: {', '.join(asks)} "
        f"(it writes tables of writer version {LEGACY_WRITER_VERSION} or lower, or 7 with "
        f"{sorted(BLIND_APPEND_WRITER_FEATURES)})"
    )


def require_no_invariants(schema_json: str, table_uri: str) -> None:
    """Raise UnsupportedTableError if a column of the table's schema (Delta's schemaString)
    carries `delta.invariants`: every write must check its rows against them."""
    columns = _columns_with(json.loads(schema_json), INVARIANTS_KEY)
    if columns:
        raise UnsupportedTableError(
            f"{table_uri} has column invariants ({INVARIANTS_KEY} on {', '.join(columns)}), "
            "which a stream's append does not enforce: drop them, or write the table otherwise"
        )


def _columns_with(schema: Any, key: str, prefix: str = "") -> list[str]:
    """The (dotted) names of the fields of a Delta schema, nested ones too, whose metadata has
    `key`."""
    found: list[str] = []
    if isinstance(schema, dict):
        if "name" in schema and key in (schema.get("metadata") or {}):
            found.append(prefix + schema["name"])
        nested = prefix + schema["name"] + "." if "name" in schema else prefix
        for name, value in schema.items():
            if name != "metadata":
                found += _columns_with(value, key, nested)
    elif isinstance(schema, list):
        for item in schema:
            found += _columns_with(item, key, prefix)
    return found


def append_entry(
    files: Sequence[DataFile],
    partition_by: Sequence[str],
    app_id: str,
    batch: int,
    now_ms: int,
) -> bytes:
    """The log entry of a batch: commitInfo (the batch in tidelake.* keys, as history shows
    them), the application transaction that makes it happen once, one add per file (its path
    as the URI that the protocol asks for)."""
    info = {
        "timestamp": now_ms,
        "operation": "WRITE",
        "operationParameters": {"mode": "Append", "partitionBy": json.dumps(list(partition_by))},
        "isBlindAppend": True,
        "engineInfo": ENGINE_INFO,
        "tidelake.app_id": app_id,
        "tidelake.batch": batch,
    }
    actions: list[dict[str, Any]] = [
        {"commitInfo": info},
        {"txn": {"appId": app_id, "version": batch, "lastUpdated": now_ms}},
    ]
    actions += [
        {
            "add": {
                "path": quote(f.path, safe=PATH_SAFE),
                "partitionValues": f.partition_values,
                "size": f.size,
                "modificationTime": f.modification_time,
                "dataChange": True,
                "stats": f.stats,
            }
        }
        for f in files
    ]
    return "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions).encode()


def entry_uri(table_uri: str, version: int) -> str:
    return join(table_uri, "_delta_log", f"{version:020d}.json")


def put_entry(table_uri: str, version: int, entry: bytes) -> bool:
    """Create version `version` of the log with `entry`: False if another writer has it."""
    return put_if_absent(entry_uri(table_uri, version), entry)


def entry_exists(table_uri: str, version: int) -> bool:
    """Whether version `version`'s entry is in the log: one look by name, no listing."""
    return Location(entry_uri(table_uri, version)).exists()


def read_entry(table_uri: str, version: int) -> list[dict[str, Any]] | None:
    """The actions of version `version` of the log, None if there is no such version."""
    try:
        text = Location(entry_uri(table_uri, version)).read_text()
    except FileNotFoundError:
        return None
    return [json.loads(line) for line in text.splitlines() if line.strip()]
