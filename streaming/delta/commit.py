"""Delta commits of tidelake's writers: validated, idempotent, atomic across processes.

Each micro-batch of a stream is one Delta transaction carrying an application transaction
(app id = the stream's query id, version = batch id). A replayed batch finds its version
already recorded and commits nothing, so Spark's at-least-once batch replay becomes
exactly-once in the table. `validate_files` checks the added files: they exist with the stated
size, sit inside the table, and carry exactly the table's partition values in their folders.

A stream appends its batch itself, as the next version of the log created only if absent
(delta/log_append.py, storage/conditional_put.py: a hard link on local disk, a conditional PUT
on S3), without the two listings of `_delta_log` that delta-rs made for each commit (on local
disk each walks the whole folder, so a commit cost what the log retention keeps; issue 38). The
table stays open in this process without its file list (`StreamedTable`: a snapshot of metadata
and application transactions). When another writer took the version (a compaction, a backfill,
a zombie driver of the same batch), `read_winners` reads the versions that follow by name, one
file each, as Delta's rule for a blind append asks: an application transaction that records the
batch already (the batch is then skipped), a protocol this writer cannot honour (refused), a
metadata change (the batch is checked again against the new schema and partitioning, and refused
if it no longer fits, where delta-spark aborts with MetadataChangedException). Before each put the
version this process last knew is looked for by name: a log that went back (the folder replaced by
an older copy) stops the stream (TableReplacedError) instead of taking a version after a gap.

The snapshot is read again, one listing, when the stream checkpoints the table (every
`delta.checkpointInterval` versions: a streamed checkpoint, a fraction of a second, where
delta-rs's hook on a snapshot with files replays and holds them all) and when it is older than
`REREAD_AFTER_S`, which settings.py holds below the log retention. The expired-log cleanup is
left to the log upkeep (delta/maintenance.py `upkeep_log`, an hourly Dagster schedule), which
cuts the log to the retention that tidelake sets on every table it creates or streams into
(`TIDELAKE_DELTA_LOG_RETENTION`). Rows written by the driver (append_rows_once) and replaced dates
(replace_partitions) are committed by delta-rs, which checks conflicts itself.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    PostCommitHookProperties,
    Transaction,
)

from tidelake.streaming.delta import log_append
from tidelake.streaming.delta.commit_races import retry_lost_commits
from tidelake.streaming.delta.constraints import check_constraints
from tidelake.streaming.delta.files import DataFile
from tidelake.streaming.delta.tables import open_table, write_table
from tidelake.streaming.errors import SetupError, StartQueryAgainError, TidelakeError
from tidelake.streaming.settings import (
    DELTA_CHECKPOINT_INTERVAL,
    REREAD_AFTER_S,
    load_engine_settings,
)
from tidelake.streaming.storage.location import delta_storage_options, filesystem
from tidelake.streaming.storage.uri import is_object_store

log = logging.getLogger(__name__)


class DeltaCommitError(TidelakeError, RuntimeError):
    """Files cannot be committed as described; nothing was committed."""


class ConstraintsChangedError(StartQueryAgainError):
    """Another writer added or dropped a CHECK constraint of the table after the stream's query
    was planned: the batch is not committed, the query starts again with the new constraints."""


class TableReplacedError(SetupError, RuntimeError):
    """The table's log is older than the version this process committed: the folder was
    replaced by an older copy (a restore from backup). Appending would leave a gap in the log."""


@dataclass(frozen=True)
class CommitResult:
    table_uri: str
    version: int | None  # Delta version written, None if skipped
    files: int
    rows: int
    skipped: bool


STREAM_COMMIT_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
"""Commits through delta-rs on a stream's table run no post-commit hook: the stream checkpoints
by itself, the log upkeep deletes expired entries (the cleanup lists the whole `_delta_log`)."""

LOST_RACES_AT_MOST = 1_000
"""Versions taken by other writers that one append reads past before it gives up."""


@dataclass
class StreamedTable:
    """A table this process streams into: delta-rs's snapshot as last read (without its file
    list), and what the log holds after it that this process appended or read by name."""

    table_uri: str
    snapshot: DeltaTable
    version: int = field(init=False)
    transactions: dict[str, int] = field(init=False, default_factory=dict)
    checkpoint_interval: int = field(init=False)
    """delta.checkpointInterval of the snapshot's metadata (a metadata change re-reads it)."""
    constraints: dict[str, str] = field(init=False)
    """The table's CHECK constraints as the snapshot's metadata has them (delta/constraints.py)."""
    read_at: float = field(init=False)
    fitting: set[tuple[pa.Schema, tuple[str, ...]]] = field(init=False, default_factory=set)
    """The batches' schemas and partitionings found to fit the snapshot's metadata."""

    def __post_init__(self) -> None:
        self._read()

    def transaction_version(self, app_id: str) -> int | None:
        """The batch of `app_id` the table holds as its latest transaction, as far as this
        process knows: one appended or read after the snapshot, else the snapshot's (PROTOCOL.md:
        the latest `txn` of an app id wins, whatever its version)."""
        if app_id in self.transactions:
            return self.transactions[app_id]
        return self.snapshot.transaction_version(app_id)

    def reread(self) -> None:
        """Bring the snapshot up to date: one listing of `_delta_log` from its version. A log
        whose latest version is older than this process's is a replaced table
        (TableReplacedError)."""
        known = self.version
        try:
            self.snapshot.update_incremental()
        except DeltaError:  # the versions it had went: the folder was replaced
            self.snapshot = open_table(self.table_uri, without_files=True)
        self._read()
        if self.version < known:
            raise _replaced(self.table_uri, known, self.version)

    def require_own_version(self) -> None:
        """Raise TableReplacedError if the log's latest version is older than the one this
        process last committed or read (the folder replaced by an older copy). One look at that
        version's entry by name; the log is listed only when it is gone, which the upkeep also
        does to entries older than the log retention behind a checkpoint."""
        if self.version < 0 or log_append.entry_exists(self.table_uri, self.version):
            return
        latest = open_table(self.table_uri, without_files=True).version()
        if latest < self.version:
            raise _replaced(self.table_uri, self.version, latest)

    def reread_if_old(self) -> None:
        if time.monotonic() - self.read_at > REREAD_AFTER_S:
            self.reread()

    def _read(self) -> None:
        _require_blind_appends(self.snapshot)
        self.version = self.snapshot.version()
        self.transactions.clear()
        self.fitting.clear()
        configuration = self.snapshot.metadata().configuration
        interval = configuration.get("delta.checkpointInterval", DELTA_CHECKPOINT_INTERVAL)
        self.checkpoint_interval = int(interval)
        self.constraints = check_constraints(configuration)
        self.read_at = time.monotonic()

    def require_fit(self, schema: pa.Schema, partition_by: Sequence[str]) -> None:
        """Raise DeltaCommitError unless files of `schema` partitioned by `partition_by` fit the
        table's metadata as this snapshot has it (checked again after each read)."""
        shape = (schema, tuple(partition_by))
        if shape not in self.fitting:
            require_fit(self.snapshot, schema, partition_by)
            self.fitting.add(shape)

    def append(self, entry: bytes, app_id: str, batch: int) -> bool:
        """Create the next version with `entry`, batch `batch` of `app_id`; False if another
        writer created it first, whose version this process then reads (see read_winners).
        Never after a log that went back (require_own_version): that would leave a gap."""
        self.require_own_version()
        if log_append.put_entry(self.table_uri, self.version + 1, entry):
            self.version += 1
            self.transactions[app_id] = batch
            return True
        self.read_winners()
        return False

    def catch_up(self) -> None:
        """Read the versions other writers committed after this process's by name (one look when
        there is none): a batch sees the table's metadata, its constraints, before it commits."""
        if log_append.entry_exists(self.table_uri, self.version + 1):
            self.read_winners()

    def read_winners(self) -> None:
        """Read the versions after this process's by name, up to the first that does not exist:
        their application transactions, protocol and metadata changes (a new snapshot then,
        against which the next append checks its batch again: require_fit)."""
        metadata_changed = False
        known = self.version
        while (actions := log_append.read_entry(self.table_uri, self.version + 1)) is not None:
            self.version += 1
            for action in actions:
                if "txn" in action:  # the latest of an app id wins (PROTOCOL.md)
                    txn = action["txn"]
                    self.transactions[txn["appId"]] = int(txn["version"])
                elif "protocol" in action:
                    log_append.require_blind_appends(action["protocol"], self.table_uri)
                elif "metaData" in action:
                    metadata_changed = True
        if metadata_changed or self.version == known:  # or the version went before it was read
            self.reread()


def _replaced(table_uri: str, known: int, latest: int) -> TableReplacedError:
    return TableReplacedError(
        f"{table_uri}: the log's latest version is {latest}, older than version {known} this "
        "stream committed or read: the table was replaced by an older copy. Nothing was appended "
        "(the next version would leave a gap); start the stream again and its start-up guard "
        "compares the checkpoint with the restored table"
    )


def _require_blind_appends(table: DeltaTable) -> None:
    protocol = table.protocol()
    log_append.require_blind_appends(
        {
            "minWriterVersion": protocol.min_writer_version,
            "writerFeatures": protocol.writer_features,
        },
        table.table_uri,
    )
    log_append.require_no_invariants(table.schema().to_json(), table.table_uri)


_open_tables: dict[str, StreamedTable] = {}
_checked: set[tuple[str, pa.Schema, tuple[str, ...]]] = set()


def _latest(table_uri: str) -> StreamedTable:
    """The table at its latest version, kept open across batches in this process (raises
    TableNotFoundError if none).

    Spark's sink commit runner lives as long as the query; reopening the table each batch
    replayed its log since the last checkpoint, catching up incrementally costs a few ms.
    """
    table = _open_tables.get(table_uri)
    if table is not None:
        table.reread()
        return table
    return _reopen(table_uri)


def _reopen(table_uri: str) -> StreamedTable:
    table = StreamedTable(table_uri, open_table(table_uri, without_files=True))
    _open_tables[table_uri] = table
    return table


def _open_table(table_uri: str, schema: pa.Schema, partition_by: Sequence[str]) -> StreamedTable:
    """The kept-open table, checked (or created) once for this schema and layout, not brought
    up to date here: an append finds the versions it missed by name."""
    key = _table_key(table_uri, schema, partition_by)
    if key not in _checked:
        ensure_table(table_uri, schema, partition_by)
        _checked.add(key)
    table = _open_tables.get(table_uri)
    return table if table is not None else _latest(table_uri)


def _table_key(
    table_uri: str, schema: pa.Schema, partition_by: Sequence[str]
) -> tuple[str, pa.Schema, tuple[str, ...]]:
    """Another schema or partitioning of the same table is validated afresh."""
    return (table_uri, schema, tuple(partition_by))


def create_table(table_uri: str, schema: pa.Schema, partition_by: Sequence[str]) -> DeltaTable:
    """An empty table (its folder too); a concurrent creator's table is kept as it is."""
    if not is_object_store(table_uri):
        os.makedirs(table_uri, exist_ok=True)
    DeltaTable.create(
        table_uri,
        schema,
        mode="ignore",
        partition_by=list(partition_by) or None,
        configuration=table_properties(),
        storage_options=delta_storage_options(table_uri),
    )
    return open_table(table_uri)


def table_properties() -> dict[str, str]:
    """The Delta table properties of tidelake's tables, from the engine settings."""
    return load_engine_settings().delta_table_properties()


def apply_table_properties(table: DeltaTable) -> dict[str, str]:
    """Set tidelake's table properties on a table that lacks them or has others (a table made
    before they existed, or under other settings); returns what changed. One metadata commit:
    another writer's commit in flight fails with "Metadata changed" and retries."""
    have = table.metadata().configuration
    changed = {k: v for k, v in table_properties().items() if have.get(k) != v}
    if changed:
        log.info("%s: setting table properties %s", table.table_uri, changed)
        table.alter.set_table_properties(changed, post_commithook_properties=STREAM_COMMIT_HOOKS)
        table.update_incremental()
    return changed


def ensure_table(table_uri: str, schema: pa.Schema, partition_by: Sequence[str]) -> DeltaTable:
    """Open the table, creating it empty if missing, with tidelake's table properties; refuse a
    schema or layout mismatch.

    A query calls it as it starts, so this process's kept-open snapshot of the table is dropped
    here and its first batch reads the latest: a table restored from an older copy meanwhile
    is not committed to as of the snapshot it no longer has."""
    _open_tables.pop(table_uri, None)
    try:
        table = open_table(table_uri)
    except TableNotFoundError:
        table = create_table(table_uri, schema, partition_by)
    require_fit(table, schema, partition_by)
    _require_blind_appends(table)
    apply_table_properties(table)
    return table


def require_fit(table: DeltaTable, schema: pa.Schema, partition_by: Sequence[str]) -> None:
    """Raise DeltaCommitError unless files of `schema` partitioned by `partition_by` may be
    added to `table` as its metadata stands: the same partitioning, each column in the table
    with its type and no more nullable than the table's (nested fields too), and the table's
    other columns nullable (the files lack them)."""
    table_uri = table.table_uri
    existing = table.metadata().partition_columns
    if list(existing) != list(partition_by):
        raise DeltaCommitError(
            f"{table_uri} is partitioned by {existing}, the stream writes {list(partition_by)}"
        )
    have = pa.schema(table.schema().to_arrow())
    missing = [f.name for f in schema if f.name not in have.names]
    if missing:
        raise DeltaCommitError(f"{table_uri} lacks columns {missing} that the stream writes")
    changed = [
        f"{f.name}: table {have.field(f.name).type}, stream {f.type}"
        for f in schema
        if not same_column_type(have.field(f.name).type, f.type)
    ]
    if changed:
        raise DeltaCommitError(f"{table_uri} has other column types: {'; '.join(changed)}")
    required = [f.name for f in have if not f.nullable and f.name not in schema.names]
    if required:
        raise DeltaCommitError(
            f"{table_uri} requires columns {required} that the stream does not write"
        )
    loosened = [name for f in schema for name in _nulls_allowed(have.field(f.name), f, f.name)]
    if loosened:
        raise DeltaCommitError(
            f"{table_uri} requires {loosened} to be non-null, which the stream writes as "
            "nullable (the append does not check its rows against the table's NOT NULL)"
        )


def _nulls_allowed(table: pa.Field, stream: pa.Field, name: str) -> list[str]:
    """The (dotted) fields, nested ones too, that the table declares non-null and the stream's
    schema nullable: Delta's writers must keep nulls out of them, which a stream's append does
    not check row by row. Fields of the same type (same_column_type) are compared."""
    found = [name] if not table.nullable and stream.nullable else []
    t, s = table.type, stream.type
    if pa.types.is_struct(t) and pa.types.is_struct(s):
        for child in s:
            index = t.get_field_index(child.name)
            if index >= 0:
                found += _nulls_allowed(t.field(index), child, f"{name}.{child.name}")
    elif _is_list(t) and _is_list(s):
        found += _nulls_allowed(t.value_field, s.value_field, f"{name}.element")
    return found


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t))


def same_column_type(table_type: pa.DataType, stream_type: pa.DataType) -> bool:
    """Equal up to Arrow's large/view variants, which delta-rs may hand back for strings,
    binaries and lists (also inside structs and lists), and up to field names of list items."""
    return bool(_base_type(table_type) == _base_type(stream_type))


def _base_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if _is_list(t):
        return pa.list_(_base_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _base_type(f.type)) for f in t])
    return t


def batch_recorded(table_uri: str, app_id: str, version: int) -> bool:
    """Whether the table records batch `version` of the stream `app_id` (a replay), as the
    snapshot this process keeps open says, without bringing it up to date (opened if none).

    That table knows every batch this process committed, and a process that starts opens the
    latest. A batch it cannot see (a zombie driver's commit of the same batch) is caught by the
    commit instead: the put of the next version finds it taken, read_winners reads the winner's
    application transaction by name, and commit_files skips the batch. Bringing the snapshot up
    to date here would list the whole `_delta_log` on local disk for every batch
    (docs/benchmarks.md, issue 38)."""
    table = _open_tables.get(table_uri)
    try:
        done = (table or _latest(table_uri)).transaction_version(app_id)
    except TableNotFoundError:
        return False
    return _holds(done, version)


def table_transaction(table_uri: str, app_id: str) -> int | None:
    """The newest version of an application transaction the table records, None if none (or no
    table yet)."""
    try:
        return _latest(table_uri).transaction_version(app_id)
    except TableNotFoundError:
        return None


def validate_files(table_uri: str, files: Sequence[DataFile], partition_by: Sequence[str]) -> None:
    """Reject anything that would corrupt the table if committed."""
    fs, root = filesystem(table_uri)
    seen: set[str] = set()
    infos = fs.get_file_info([f"{root}/{f.path}" for f in files])
    for f, info in zip(files, infos, strict=True):
        if f.path.startswith("/") or ".." in f.path.split("/") or "://" in f.path:
            raise DeltaCommitError(f"file path {f.path!r} is not inside {table_uri}")
        if f.path in seen:
            raise DeltaCommitError(f"file {f.path} is listed twice")
        seen.add(f.path)
        if info.type != pafs.FileType.File:
            raise DeltaCommitError(f"file {f.path} does not exist in {table_uri}")
        if info.size != f.size:
            raise DeltaCommitError(f"file {f.path} has {info.size} bytes, expected {f.size}")
        if set(f.partition_values) != set(partition_by):
            raise DeltaCommitError(
                f"file {f.path} has partition values for {sorted(f.partition_values)}, "
                f"table is partitioned by {list(partition_by)}"
            )
        folders = f.path.split("/")[: len(partition_by)]
        if [_partition_of(folder) for folder in folders] != [
            (k, f.partition_values[k]) for k in partition_by
        ]:
            folder = "/".join(f"{k}={f.partition_values[k]}" for k in partition_by)
            raise DeltaCommitError(f"file {f.path} is not in its partition folder {folder}")
        if f.num_records <= 0:
            raise DeltaCommitError(f"file {f.path} holds no rows")


def _partition_of(folder: str) -> tuple[str, str]:
    """(column, value) of a partition folder `column=value`, the value's escapes undone (Spark
    escapes a few characters, delta/files.py all but letters and digits, both as %XX)."""
    column, _, value = folder.partition("=")
    return column, unquote(value)


def commit_files(
    table_uri: str,
    files: Sequence[DataFile],
    *,
    schema: pa.Schema,
    partition_by: Sequence[str],
    app_id: str,
    version: int,
    constraints: Mapping[str, str] | None = None,
) -> CommitResult:
    """Append files in one transaction, once per (app_id, version). With `constraints`, the
    CHECK constraints the files' rows were checked against: a table whose constraints differ at
    the put (another writer added or dropped one) is not appended to (ConstraintsChangedError)."""
    rows = sum(f.num_records for f in files)
    validate_files(table_uri, files, partition_by)
    table = _open_table(table_uri, schema, partition_by)
    table.reread_if_old()
    entry = log_append.append_entry(files, partition_by, app_id, version, int(time.time() * 1000))
    for lost in range(LOST_RACES_AT_MOST):
        if _committed_already(table.transaction_version(app_id), table_uri, app_id, version):
            return CommitResult(table_uri, None, len(files), rows, skipped=True)
        table.require_fit(schema, partition_by)  # again after another writer's metadata change
        if constraints is not None:
            require_constraints(table, constraints)
        if table.append(entry, app_id, version):
            break
        log.warning(
            "%s: batch %s of %s lost a commit race (%s); read the log up to version %s",
            table_uri,
            version,
            app_id,
            lost + 1,
            table.version,
        )
    else:
        raise DeltaCommitError(
            f"{table_uri}: batch {version} of {app_id} lost {LOST_RACES_AT_MOST} commit races"
        )
    committed = table.version
    if committed % table.checkpoint_interval == 0:
        _checkpoint(table)
    return CommitResult(table_uri, committed, len(files), rows, skipped=False)


def require_constraints(table: StreamedTable, constraints: Mapping[str, str]) -> None:
    """Raise ConstraintsChangedError unless the table's CHECK constraints are `constraints`."""
    if table.constraints != dict(constraints):
        raise ConstraintsChangedError(
            f"{table.table_uri}: the CHECK constraints changed at version {table.version} "
            f"(now {table.constraints or 'none'}, the batch was checked against "
            f"{dict(constraints) or 'none'}): the batch is not committed, the query starts "
            "again with the table's constraints"
        )


def current_constraints(table_uri: str) -> dict[str, str]:
    """The table's CHECK constraints now, read through the kept-open table (other writers'
    versions by name, no listing); none when there is no table yet."""
    table = _open_tables.get(table_uri)
    try:
        if table is None:
            table = _latest(table_uri)
        else:
            table.catch_up()
    except TableNotFoundError:
        return {}
    return dict(table.constraints)


def _checkpoint(table: StreamedTable) -> None:
    """Checkpoint the kept-open table (at its latest version). Streamed from the last checkpoint
    and the commits since (0.3 s at 63,000 live files), it bounds what each read of the
    snapshot replays; a failure only delays it to the next interval."""
    try:
        table.reread()
        table.snapshot.create_checkpoint()
    except DeltaError as exc:
        log.warning("%s: checkpoint at version %s failed: %s", table.table_uri, table.version, exc)


def append_rows_once(
    table_uri: str,
    rows: pa.Table,
    *,
    partition_by: Sequence[str],
    app_id: str,
    version: int,
) -> bool:
    """Append rows written by delta-rs in one transaction, once per (app_id, version), like
    commit_files for files Spark wrote: a replayed batch is skipped, a concurrent commit re-checked.
    True if this call committed them."""
    for attempt in retry_lost_commits(f"{table_uri}: batch {version} of {app_id}"):
        with attempt:
            if _committed_already(table_transaction(table_uri, app_id), table_uri, app_id, version):
                return False
            write_table(
                table_uri,
                rows,
                mode="append",
                partition_by=list(partition_by) or None,
                commit_properties=_batch_commit(app_id, version),
                configuration=table_properties(),  # taken when the write creates the table
            )
    return True


def _committed_already(done: int | None, table_uri: str, app_id: str, version: int) -> bool:
    """Whether the table's app transaction `done` already holds batch `version` (a replay)."""
    if _holds(done, version):
        log.info("%s: batch %s of %s already committed, skipping", table_uri, version, app_id)
        return True
    return False


def _holds(done: int | None, version: int) -> bool:
    """Whether an application transaction at `done` holds batch `version`."""
    return done is not None and done >= version


def _batch_commit(app_id: str, version: int) -> CommitProperties:
    """What a batch's commit records: the app transaction that makes it happen once, and the
    batch in the commit's own metadata."""
    return CommitProperties(
        app_transactions=[Transaction(app_id, version, int(time.time() * 1000))],
        custom_metadata={"tidelake.app_id": app_id, "tidelake.batch": version},
    )


def replace_partitions(
    table_uri: str,
    files: Sequence[DataFile],
    *,
    partition_column: str,
    values: Sequence[str],
    read_version: int,
) -> CommitResult:
    """Replace partitions `values` with `files` in one commit, as of snapshot read_version.

    delta-rs removes the partitions' files of that snapshot, so files that other writers (the
    live stream) appended since then survive the commit: a backfill that read everything the
    stream had committed at read_version replaces exactly that. The commit keeps the table's
    own schema (an overwrite rewrites the table's metadata; its column contracts must stay).
    """
    validate_files(table_uri, files, [partition_column])
    wrong = {f.partition_values.get(partition_column) for f in files} - set(values)
    if wrong:
        raise DeltaCommitError(f"{table_uri}: files outside the replaced partitions: {wrong}")
    table = open_table(table_uri, version=read_version)
    schema = open_table(table_uri).schema()
    actions = [
        AddAction(f.path, f.size, f.partition_values, f.modification_time, True, f.stats)
        for f in files
    ]
    table.create_write_transaction(
        actions,
        "overwrite",
        schema,
        [partition_column],
        partition_filters=[(partition_column, "in", list(values))],
        commit_properties=CommitProperties(
            custom_metadata={"tidelake.replaced": ",".join(values), "tidelake.read": read_version}
        ),
    )
    latest = open_table(table_uri)
    return CommitResult(
        table_uri, latest.version(), len(files), sum(f.num_records for f in files), skipped=False
    )
