"""Moving a stream onto a new checkpoint when Spark cannot reuse the old one.

Spark refuses to restart a query that has a stateful operator (deduplication) from a checkpoint
written without one (STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY). The old checkpoint is
kept beside the new one, and the new query starts exactly where the table says the old one
stopped, so no record is lost or written twice. The start is pinned in a file inside the new
checkpoint, because a Python data source's initial offset is not in Spark's offset log: a query
that fails before its first commit must restart from the same place.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from tidelake.streaming.stream_status import written_position

log = logging.getLogger(__name__)

START_OFFSETS_FILE = "tidelake-start-offsets.json"


def lacks_state(checkpoint: str | Path) -> bool:
    """True if the checkpoint has committed batches but no state (written by a stateless query)."""
    root = Path(checkpoint)
    commits = root / "commits"
    has_commits = commits.is_dir() and any(p.name.isdigit() for p in commits.iterdir())
    return has_commits and not (root / "state").exists()


def start_new_checkpoint(checkpoint: str | Path, table_uri: str) -> Path:
    """Retire the checkpoint (renamed, never deleted) and pin the new one's start; returns the
    retired folder."""
    root = Path(checkpoint)
    try:
        written = written_position(root, DeltaTable(table_uri))
    except TableNotFoundError:
        written = None
    retired = root.with_name(f"{root.name}.retired-{time.strftime('%Y%m%dT%H%M%S')}")
    root.rename(retired)
    root.mkdir(parents=True)
    if written is not None:
        (root / START_OFFSETS_FILE).write_text(written)
    log.warning(
        "checkpoint %s was written without deduplication state; it is kept as %s and the stream "
        "starts a new one at %s",
        root,
        retired,
        written or "the topic's earliest offsets (the table holds nothing of the old query)",
    )
    return retired


def pinned_start(checkpoint: str | Path) -> str | None:
    """The startingOffsets JSON pinned by start_new_checkpoint, if any."""
    path = Path(checkpoint) / START_OFFSETS_FILE
    return path.read_text() if path.exists() else None
