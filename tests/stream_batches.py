"""A stream's micro-batch as the commit tests write it: one row numbered by the batch, committed
with the stream's transaction (app id, batch) through `commit_files`, as `tidelake stream` does."""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pyarrow as pa

from tidelake.streaming.delta.commit import commit_files
from tidelake.streaming.delta.files import write_arrow_files
from tidelake.streaming.delta.log_append import append_entry, put_entry

SCHEMA = pa.schema([("n", pa.int64()), ("date", pa.date32())])
DAY = dt.date(2026, 11, 26)


def batch_rows(*numbers: int) -> pa.Table:
    return pa.table({"n": list(numbers), "date": [DAY] * len(numbers)}, schema=SCHEMA)


def commit_batch(uri: str, batch: int, app_id: str = "app") -> None:
    """Batch `batch` of stream `app_id`; its data file's name is new each time (a zombie's
    commit of the same batch writes files of its own, as a real one would)."""
    files = write_arrow_files(
        batch_rows(batch), uri, "date", f"{app_id}-{batch}-{uuid.uuid4().hex[:6]}"
    )
    commit_files(uri, files, schema=SCHEMA, partition_by=["date"], app_id=app_id, version=batch)


def commit_elsewhere(uri: str, version: int, batch: int, app_id: str = "app") -> None:
    """Batch `batch` of stream `app_id` committed at `version` by another process (a zombie
    driver, another stream), as its own commit_files would: its entry put by name, so that this
    process's kept-open table does not see it."""
    files = write_arrow_files(batch_rows(batch), uri, "date", f"{app_id}-{batch}-elsewhere")
    now_ms = int(time.time() * 1000)
    assert put_entry(uri, version, append_entry(files, ["date"], app_id, batch, now_ms))
