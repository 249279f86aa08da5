"""Where a stream stands, read from outside the stream: its checkpoint, Kafka's ends, its table,
the dates it has closed, and what grows with its age (its state, its table's log since the last
checkpoint, its checkpoint folder).

Supervisors and health checks use these without Spark: the checkpoint is a folder of small JSON
files, Kafka's ends come from one bounded probe, and the table's progress from the Delta log's
per-file statistics (no data file is read).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pyarrow.fs as pafs
from deltalake import DeltaTable

from tidelake.streaming.delta.log_append import entry_uri
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.offsets import PartitionEnds, from_json_offsets
from tidelake.streaming.storage.location import Location, filesystem


@dataclass(frozen=True)
class CommittedBatch:
    """The newest micro-batch that the stream's checkpoint records as fully committed."""

    batch_id: int
    offsets: dict[int, int]
    """Kafka partition -> next offset to read (the end of this batch)."""
    committed_at: datetime


def committed_batch(checkpoint: str, topic: str) -> CommittedBatch | None:
    """The checkpoint's newest committed batch, or None before the first commit.

    A batch is committed once `commits/<id>` exists; its end offsets are the source line of
    `offsets/<id>` (Spark's offset log: version, metadata, then one line per source).
    """
    root = Location(checkpoint)
    commits = _batch_files(root / "commits")
    for batch_id in sorted(commits, reverse=True):
        offsets_file = root / "offsets" / str(batch_id)
        if not offsets_file.exists():
            continue
        lines = offsets_file.read_text().splitlines()
        if len(lines) < 3:
            continue
        ends = from_json_offsets(lines[2])
        return CommittedBatch(
            batch_id=batch_id,
            offsets={p: o for (t, p), o in ends.items() if t == topic},
            committed_at=commits[batch_id].modified_at(),
        )
    return None


def written_position(checkpoint: str, *tables: DeltaTable) -> str | None:
    """End offsets (the offset log's JSON) of the newest batch of this checkpoint's query that
    any of the tables holds, or None if they hold none.

    The Delta sink records each batch as the app transaction `tidelake-<query id>` of every table
    it writes; its version is the batch id. This is the tables' word, so a batch written but not
    yet marked committed in the checkpoint counts.
    """
    root = Location(checkpoint)
    try:
        query_id = json.loads((root / "metadata").read_text())["id"]
    except (OSError, ValueError, KeyError):
        return None
    batches = [t.transaction_version(f"tidelake-{query_id}") for t in tables]
    written = [b for b in batches if b is not None]
    if not written:
        return None
    lines = (root / "offsets" / str(max(written))).read_text().splitlines()
    return lines[2]


def _batch_files(folder: Location) -> dict[int, Location]:
    return {int(name): folder / name for name in folder.names() if name.isdigit()}


@dataclass(frozen=True)
class StreamLag:
    """Records on Kafka that the stream has not committed yet, per partition and in total."""

    by_partition: dict[int, int]

    @property
    def total(self) -> int:
        return sum(self.by_partition.values())


def kafka_ends(kafka_conf: dict[str, str], topic: str, timeout_s: float = 5.0) -> dict[int, int]:
    """Exact end offset of every partition of `topic`; raises KafkaSourceError within timeout_s."""
    probe = PartitionEnds(kafka_conf, "tidelake-status", timeout_s)
    try:
        partitions = probe.partitions([topic])
        ends = probe.latest(partitions)
    finally:
        probe.close()
    return {p: o for (_, p), o in ends.items()}


def first_record_date(
    kafka_conf: dict[str, str], topic: str, timeout_s: float = 5.0
) -> date | None:
    """UTC date of the oldest record `topic` still holds (by Kafka timestamp); None if empty."""
    probe = PartitionEnds(kafka_conf, "tidelake-status", timeout_s)
    try:
        firsts = probe.records_at(probe.earliest(probe.partitions([topic])))
    finally:
        probe.close()
    stamps = [found[1] for found in firsts.values() if found is not None]
    return datetime.fromtimestamp(min(stamps) / 1000, UTC).date() if stamps else None


def stream_lag(ends: Mapping[int, int], done: Mapping[int, int]) -> StreamLag:
    """Kafka end offsets minus the stream's offsets (a whole partition if it has none).

    Before the first commit the whole topic counts as lag, which slightly overstates it when
    retention has deleted the start of a partition.
    """
    return StreamLag({p: max(0, end - done.get(p, 0)) for p, end in sorted(ends.items())})


def closed_dates(
    flow: FlowSpec,
    kafka_conf: Mapping[str, str],
    position: Mapping[int, int],
    first: date,
    timeout_s: float = 5.0,
    most: int = 366,
) -> list[str]:
    """Dates from `first` on that the stream has closed, oldest first, at most `most`.

    The stream's own clock decides: a record of D is too late once its partition holds a data
    record stamped after D closed (FlowSpec.closes_at) at or before it (records/decode.py). So D
    is closed for good when, in every partition of the topic, the stream's committed `position`
    (partition -> next offset) has passed such a record: the stream can accept no more of D.
    A partition that has received nothing since D closed holds D open. Includes empty days, so
    daily consumers see every day exactly once, in order.
    """
    probe = PartitionEnds(dict(kafka_conf), "tidelake-status", timeout_s)
    try:
        partitions = probe.partitions([flow.topic])
        below = {tp: position.get(tp[1], 0) for tp in partitions}
        out: list[str] = []
        day = first
        while len(out) < most:
            closes_ms = int(flow.closes_at(day).timestamp() * 1000)
            passed = probe.first_records_after(partitions, closes_ms, below=below)
            if any(offset is None for offset in passed.values()):
                break
            out.append(day.isoformat())
            day += timedelta(days=1)
        return out
    finally:
        probe.close()


@dataclass(frozen=True)
class StateSize:
    """A micro-batch's deduplication state, from Spark's progress (`stateOperators`), summed over
    the stateful operators."""

    keys: int | None
    """Keys held (numRowsTotal); None when Spark does not count them: tidelake's session turns
    `spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows` off (the count made every
    state write read its key first), and Spark then reports 0."""
    keys_written: int
    """Keys put in this batch (numRowsUpdated)."""
    keys_expired: int
    """Keys whose lifetime ended in this batch (customMetrics.numValuesRemovedDueToTTLExpiry)."""
    memory_bytes: int
    """The stores' memory (memoryUsedBytes), within RocksDB's bounded budget."""
    disk_bytes: int
    """The stores' live SST files (customMetrics.rocksdbSstFileSize)."""


def state_size(progress: Mapping[str, Any]) -> StateSize | None:
    """The deduplication state of a progress, None if the query keeps no state."""
    operators = progress.get("stateOperators") or []
    if not operators:
        return None

    def total(name: str, custom: bool = False) -> int:
        values = [(op.get("customMetrics") or {}) if custom else op for op in operators]
        return sum(int(v.get(name) or 0) for v in values)

    keys = total("numRowsTotal")
    return StateSize(
        keys=keys or None,
        keys_written=total("numRowsUpdated"),
        keys_expired=total("numValuesRemovedDueToTTLExpiry", custom=True),
        memory_bytes=total("memoryUsedBytes"),
        disk_bytes=total("rocksdbSstFileSize", custom=True),
    )


@dataclass(frozen=True)
class LogSinceCheckpoint:
    """A Delta table's newest checkpoint and latest version."""

    checkpoint_version: int | None
    """From `_delta_log/_last_checkpoint`; None before the first checkpoint."""
    version: int

    @property
    def entries(self) -> int:
        """Log entries a reader replays on top of the checkpoint (every one without it)."""
        since = -1 if self.checkpoint_version is None else self.checkpoint_version
        return self.version - since


def log_since_checkpoint(table_uri: str) -> LogSinceCheckpoint | None:
    """The table's last checkpoint and its latest version, None if it has no log yet.

    Cheap at any age: `_last_checkpoint` is one small read, and the latest version is found by
    asking for entries after it by name, doubling the step and then halving it (about
    2 log2(n) lookups for n entries since the checkpoint), never listing `_delta_log`."""
    pointer = Location(table_uri) / "_delta_log" / "_last_checkpoint"
    try:
        checkpoint: int | None = int(json.loads(pointer.read_text())["version"])
    except FileNotFoundError:
        checkpoint = None
    known = -1 if checkpoint is None else checkpoint  # a version that exists (-1: none yet)

    def exists(version: int) -> bool:
        return Location(entry_uri(table_uri, version)).exists()

    step = 1
    while exists(known + step):
        known, step = known + step, step * 2
    missing = known + step
    while missing - known > 1:  # known exists, missing does not: halve the gap
        middle = (known + missing) // 2
        known, missing = (middle, missing) if exists(middle) else (known, middle)
    if known < 0:
        return None
    return LogSinceCheckpoint(checkpoint, known)


def folder_bytes(uri: str) -> int:
    """Bytes of every file under a folder (0 if it does not exist): one recursive listing, whose
    cost follows the files the folder holds."""
    fs, path = filesystem(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sum(info.size or 0 for info in infos if info.type == pafs.FileType.File)
