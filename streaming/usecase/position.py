"""Where a use case's query stands in its input table, read from files alone (its checkpoint and
the input's Delta log): its lag in the input's versions and in time. The run's reports, the
supervisor and the freshness check all read it here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from deltalake.exceptions import TableNotFoundError

from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.storage.location import Location


def committed_input_version(checkpoint: str) -> int | None:
    """The newest input version the query's last committed batch read in full, None before its
    first commit or while the input's first snapshot is only partly read. Delta's source offset
    names the version being read (`reservoirVersion`) and the last file of it read (`index`):
    -1 when none of it was read; a version read to its end moves the offset to the next version
    with -1 (Delta never stores its END_INDEX), so an index >= 0 is a version read in part
    (maxFilesPerTrigger cut the batch inside it)."""
    root = Location(checkpoint)
    commits = root / "commits"
    if not commits.exists():
        return None
    done = [int(n) for n in commits.names() if n.isdigit()]
    if not done:
        return None
    lines = (root / "offsets" / str(max(done))).read_text().splitlines()
    offset = json.loads(lines[-1])
    return version_read(offset)


def version_read(offset: dict[str, Any]) -> int | None:
    """The newest input version read in full up to a Delta source offset (see
    committed_input_version)."""
    version, index = int(offset["reservoirVersion"]), int(offset.get("index", -1))
    if index >= 0 and offset.get("isStartingVersion"):
        return None  # the first snapshot, read in part: no version complete yet
    return version - 1


def commit_time_ms(table_uri: str, version: int) -> int | None:
    """When `version` of the table was committed (its commitInfo), None once its log entry is
    gone."""
    entry = Location(table_uri) / "_delta_log" / f"{version:020d}.json"
    try:
        text = entry.read_text()
    except (FileNotFoundError, OSError):
        return None
    for line in text.splitlines():
        action = json.loads(line)
        if "commitInfo" in action:
            stamp = action["commitInfo"].get("timestamp")
            return None if stamp is None else int(stamp)
    return None


@dataclass(frozen=True)
class UseCaseLag:
    """How far the use case is behind its input."""

    input_version: int | None
    """The input table's latest version (None: no input table yet)."""
    read_version: int | None
    """The newest input version the use case's committed batches read in full."""
    waiting_s: float
    """How long the oldest input version it has not read has been committed (0 caught up)."""

    @property
    def versions(self) -> int | None:
        if self.input_version is None:
            return None
        return self.input_version - (-1 if self.read_version is None else self.read_version)


def measure_lag(input_uri: str, checkpoint: str, now_s: float) -> UseCaseLag:
    """The use case's lag behind the input table at `input_uri`."""
    try:
        latest = open_table(input_uri, without_files=True).version()
    except TableNotFoundError:
        return UseCaseLag(None, None, 0.0)
    read = committed_input_version(checkpoint)
    if read is not None and read >= latest:
        return UseCaseLag(latest, read, 0.0)
    first_unread = 0 if read is None else read + 1
    stamp = commit_time_ms(input_uri, first_unread)
    waiting = 0.0 if stamp is None else max(0.0, now_s - stamp / 1000)
    return UseCaseLag(latest, read, waiting)
