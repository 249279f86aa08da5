"""Checks before a stream starts: its checkpoint and its table must tell the same story.

A checkpoint says which micro-batches are done; the table's application transaction
(`tidelake-<query id>`) says which batches it holds. Restoring an older copy of the table under a
newer checkpoint, or an older checkpoint over a newer table, breaks exactly-once silently: the
stream would go on from where the checkpoint stands, and the batches in between would be missing
or skipped. A deleted data file makes every later read of the table fail. So the stream refuses
to start on either, with both positions named and the way forward.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake.exceptions import TableNotFoundError

from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.delta.write import app_id
from tidelake.streaming.errors import SetupError
from tidelake.streaming.storage.location import Location, filesystem
from tidelake.streaming.stream.status import committed_batch


class StreamGuardError(SetupError, RuntimeError):
    """The stream must not start on this checkpoint and table; the message says what to do."""


def check_checkpoint_readable(flow_name: str, topic: str, checkpoint: str) -> None:
    """Refuse a checkpoint whose metadata or offset log does not parse (Spark would fail on it
    with a JSON parser's stack trace, and starting over would write every record again)."""
    root = Location(checkpoint)
    if not (root / "metadata").exists():
        return
    try:
        query_id = json.loads((root / "metadata").read_text())["id"]
        if not isinstance(query_id, str):
            raise ValueError(f"query id {query_id!r} is not a string")
        committed_batch(checkpoint, topic)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StreamGuardError(
            f"the {flow_name} checkpoint {root} is damaged ({type(exc).__name__}: {exc}). "
            "Restore the folder from a copy; if the tables hold nothing of it, move it away and "
            "the stream starts over from the topic's earliest offsets. The stream was not started."
        ) from None


def check_checkpoint_matches_table(
    flow_name: str, topic: str, checkpoint: str, table_uri: str
) -> None:
    """Refuse when the table holds fewer batches of this checkpoint's query than the checkpoint
    says are done, or more than the checkpoint can account for."""
    root = Location(checkpoint)
    done = committed_batch(checkpoint, topic)
    if done is None:
        return
    query_id = json.loads((root / "metadata").read_text())["id"]
    try:
        table = open_table(table_uri)
    except TableNotFoundError:
        raise StreamGuardError(
            f"the {flow_name} checkpoint {root} has committed batch {done.batch_id}, but there is "
            f"no table at {table_uri}. {_replay_advice(flow_name)}"
        ) from None
    held = table.transaction_version(app_id(query_id))
    if held is not None and done.batch_id <= held <= done.batch_id + 1:
        return  # held == done + 1: the table committed a batch the checkpoint had not marked
    table_says = (
        "holds no batch of this stream's query"
        if held is None
        else f"holds its batches only up to {held}"
    )
    if held is not None and held > done.batch_id:
        table_says = f"holds batches up to {held}, later than the checkpoint knows"
    raise StreamGuardError(
        f"the {flow_name} checkpoint {root} has committed batch {done.batch_id} (Kafka offsets "
        f"{_offsets_text(done.offsets)}), but table {table_uri} (version {table.version()}) "
        f"{table_says}: the table or the checkpoint was restored from an older copy. "
        + _replay_advice(flow_name)
    )


def check_table_files_exist(flow_name: str, table_uri: str) -> None:
    """Refuse when the table's current snapshot names data files that are gone."""
    try:
        table = open_table(table_uri)
    except TableNotFoundError:
        return
    actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    paths = actions.get("path", [])  # as the log has them: URIs, percent-encoded
    if not paths:
        return
    fs, root = filesystem(table_uri)
    infos = fs.get_file_info([f"{root}/{unquote(p)}" for p in paths])
    missing = [
        p for p, info in zip(paths, infos, strict=True) if info.type == pafs.FileType.NotFound
    ]
    if not missing:
        return
    dates = sorted(
        {
            str(v)
            for p, v in zip(paths, _partition_values(actions), strict=True)
            if p in set(missing)
        }
    )
    raise StreamGuardError(
        f"table {table_uri} (version {table.version()}) names {len(missing)} data file(s) that "
        f"do not exist, e.g. {missing[0]}; every read of it would fail. Restore the files from a "
        f"copy; or drop them from the table (delta-rs: DeltaTable({table_uri!r}).repair()) and "
        f"backfill the dates they held ({', '.join(dates)}) from the Dagster UI (materialize "
        f"those partitions of lake/{flow_name}). The stream was not started."
    )


def _partition_values(actions: dict[str, list[Any]]) -> list[object]:
    for name, values in actions.items():
        if name.startswith("partition."):
            return values
    return [None] * len(actions.get("path", []))


def _offsets_text(offsets: dict[int, int]) -> str:
    return ", ".join(f"{p}:{o}" for p, o in sorted(offsets.items())) or "none"


def _replay_advice(flow_name: str) -> str:
    return (
        "To replay from the table's own position, run `tidelake stream "
        f"{flow_name} --restart-from-table` once: it keeps the checkpoint under a new name and "
        "starts a new one where the table's last batch ended. The stream was not started."
    )
