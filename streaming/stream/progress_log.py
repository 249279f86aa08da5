"""Every micro-batch of a stream as one JSON line (TIDELAKE_PROGRESS_LOG).

Spark keeps a query's last 100 progresses in memory and tidelake reports one to its run log
every progress interval; an operator's log shipper, and the soak benchmark (bench/soak.py),
which watches a stream from outside its process, need each batch: Spark's progress of it
(durations, state operator, sources) plus tidelake's own write and commit times. The file
rotates, so what it keeps does not grow with the stream's age.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError
from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

ROTATE_BYTES = 16 * 1024 * 1024
ROTATED_FILES = 4
POLL_S = 0.5
"""How often the follower asks the query for its last progress (a micro-batch takes longer)."""

BatchTimes = Callable[[int], Mapping[str, float] | None]
"""A batch id -> tidelake's own timings of that batch (delta/write.py), None if unknown."""


def progress_file(folder: Path, query_name: str) -> Path:
    """Where the progress log of query `query_name` writes, under TIDELAKE_PROGRESS_LOG."""
    return folder / f"{query_name}.jsonl"


class ProgressLog:
    """Appends each executed micro-batch of one query to `<folder>/<query name>.jsonl`."""

    def __init__(self, folder: Path, query_name: str, batch_times: BatchTimes) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = progress_file(folder, query_name)
        self._batch_times = batch_times
        self._last_batch = -1
        self._lines = logging.Logger(f"tidelake.progress.{query_name}")  # not in the hierarchy
        handler = RotatingFileHandler(
            self.path, maxBytes=ROTATE_BYTES, backupCount=ROTATED_FILES, encoding="utf-8"
        )
        handler.setFormatter(logging.Formatter("%(message)s"))
        self._lines.addHandler(handler)

    def follow(self, query: StreamingQuery) -> threading.Thread:
        """Record the query's batches from a thread of its own until the query ends."""
        name = query.name
        thread = threading.Thread(
            target=self._follow, args=(query, name), name=f"progress-log-{name}", daemon=True
        )
        thread.start()
        return thread

    def _follow(self, query: StreamingQuery, name: str) -> None:
        try:
            while True:
                active = query.isActive
                self.record(query)
                if not active:
                    return
                time.sleep(POLL_S)
        except Py4JError as exc:  # the JVM went away under the thread: asking it more would fail
            log.debug("progress log of %s ends: %s", name, exc)

    def record(self, query: StreamingQuery) -> None:
        """Write the batches that completed since the last call."""
        last = query.lastProgress
        if last is None or not _executed(last) or last["batchId"] <= self._last_batch:
            return
        gap = self._last_batch >= 0 and last["batchId"] > self._last_batch + 1
        for progress in query.recentProgress if gap else [last]:
            if _executed(progress) and progress["batchId"] > self._last_batch:
                self.write(progress)

    def write(self, progress: Mapping[str, Any]) -> None:
        batch_id = int(progress["batchId"])
        line = dict(progress)
        line.pop("observedMetrics", None)  # the writer's refused rows: the quarantine has them
        line["tidelake"] = dict(self._batch_times(batch_id) or {})
        self._lines.info(json.dumps(line, default=str))
        self._last_batch = batch_id


def _executed(progress: Mapping[str, Any]) -> bool:
    """A progress of a batch that ran (an idle query reports progress without one)."""
    return "addBatch" in (progress.get("durationMs") or {})
