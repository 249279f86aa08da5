"""Moving a stream onto a new checkpoint when the old one cannot or must not go on.

Spark refuses to restart a query that has a stateful operator (deduplication) from a checkpoint
written without one (STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY), or with another
stateful operator (STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA: deduplication moved
from dropDuplicatesWithinWatermark to records/dedup.py's processor); and after a table was
restored from an older copy the checkpoint is ahead of it (stream/guard.py). The old checkpoint is
kept beside the new one, and the new query starts exactly where the tables say the old one
stopped (the furthest of those given), so no record is lost or written twice. The
start is pinned in a file inside the new checkpoint, because a Python data source's initial
offset is not in Spark's offset log: a query that fails before its first commit must restart from
the same place. Moving off the earlier deduplication operator keeps what it remembered: the new
checkpoint names the retired one, whose keys seed the new state in its first batch.
"""

from __future__ import annotations

import json
import logging
import time

from deltalake.exceptions import TableNotFoundError

from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.storage.location import Location
from tidelake.streaming.stream.status import written_position

log = logging.getLogger(__name__)

START_OFFSETS_FILE = "tidelake-start-offsets.json"
REMEMBERED_KEYS_FILE = "tidelake-remembered-keys"


def state_operator(checkpoint: str) -> str | None:
    """The name of the checkpoint's stateful operator (Spark's state metadata), if it has one."""
    path = Location(checkpoint) / "state" / "0" / "_metadata" / "metadata"
    if not path.exists():
        return None
    # a version line ("v1"), then one JSON object
    info = json.loads(path.read_text().split("\n", 1)[1])
    return str(info["operatorInfo"]["operatorName"])


def lacks_state(checkpoint: str) -> bool:
    """True if the checkpoint has committed batches but no state (written by a stateless query)."""
    root = Location(checkpoint)
    return _has_commits(root) and not (root / "state").exists()


def start_new_checkpoint(
    checkpoint: str, *table_uris: str, reason: str, keep_keys: bool = False
) -> Location:
    """Retire the checkpoint (renamed, never deleted) and pin the new one's start at the newest
    batch any of the tables (main, quarantine) holds; returns the retired folder. keep_keys
    points the new checkpoint at the retired one for the keys its deduplication remembered
    (see remembered_keys).

    The new checkpoint is staged beside the old one with its pin, then swapped in, so a crash at
    any point leaves either the old checkpoint or a pinned new one (see recover_upgrade).
    """
    root = Location(checkpoint)
    tables = []
    for uri in table_uris:
        try:
            tables.append(open_table(uri))
        except TableNotFoundError:
            continue
    written = written_position(root.uri, *tables)
    staged = root.with_name(f"{root.name}.new")
    staged.delete_tree()
    # the staged folder exists once it holds a file; the pin is written whole (a rename
    # locally, one PUT on S3) so a crash never leaves half of it
    (staged / "tidelake-staged").write_text("")
    if written is not None:
        (staged / START_OFFSETS_FILE).write_text(written)
    retired = root.with_name(f"{root.name}.retired-{time.strftime('%Y%m%dT%H%M%S')}")
    if keep_keys:
        (staged / REMEMBERED_KEYS_FILE).write_text(retired.uri)
    if root.is_dir():
        root.rename(retired)
    staged.rename(root)
    log.warning(
        "checkpoint %s is retired (%s); it is kept as %s and the stream starts a new one at %s",
        root,
        reason,
        retired,
        written or "the topic's earliest offsets (the tables hold nothing of the old query)",
    )
    return retired


def recover_upgrade(checkpoint: str) -> None:
    """Finish an upgrade that stopped between retiring the old checkpoint and swapping in the
    staged one."""
    root = Location(checkpoint)
    staged = root.with_name(f"{root.name}.new")
    if not root.is_dir() and staged.is_dir():
        staged.rename(root)
        log.warning("finished moving the staged checkpoint %s into place", root)


def remembered_keys(checkpoint: str) -> str | None:
    """The retired checkpoint whose deduplication state seeds this one's first batch: named by
    start_new_checkpoint(keep_keys=True), until this checkpoint commits a batch."""
    root = Location(checkpoint)
    path = root / REMEMBERED_KEYS_FILE
    if not path.exists() or _has_commits(root):
        return None
    return path.read_text()


def _has_commits(root: Location) -> bool:
    return any(name.isdigit() for name in (root / "commits").names())


def pinned_start(checkpoint: str) -> str | None:
    """The startingOffsets JSON pinned by start_new_checkpoint, if any."""
    path = Location(checkpoint) / START_OFFSETS_FILE
    return path.read_text() if path.exists() else None
