"""A use case's freshness as its run measures it: for every input version a micro-batch read, the
seconds from that version's commit to the end of the batch that wrote what it read (the batch's
own commit is its last step). Kept for the last hour, so that the run reports the p50 and p99
the use case's asset plots; read from Spark's progress of each batch and the input's Delta log."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from tidelake.streaming.usecase.position import commit_time_ms, version_read

WINDOW_S = 3600.0


@dataclass(frozen=True)
class Freshness:
    """Percentiles of the freshness samples within the window."""

    p50_s: float
    p99_s: float
    max_s: float
    samples: int
    window_s: float
    """The span the samples cover: the window, or less in a run younger than it."""


def batch_end_s(progress: Mapping[str, Any]) -> float:
    """When the batch ended: its trigger's start plus the trigger's execution time."""
    started = datetime.fromisoformat(str(progress["timestamp"]).replace("Z", "+00:00"))
    took_ms = float((progress.get("durationMs") or {}).get("triggerExecution", 0))
    return started.timestamp() + took_ms / 1000


def versions_read(progress: Mapping[str, Any]) -> range:
    """The input versions the batch read to their end (none for a batch without a start offset:
    a query's very first batch reads the input as it stood, whose age is the backlog's)."""
    sources = progress.get("sources") or [{}]
    start, end = (_offset(sources[0].get(k)) for k in ("startOffset", "endOffset"))
    if start is None or end is None:
        return range(0)
    before, through = version_read(start), version_read(end)
    if through is None:
        return range(0)
    return range((-1 if before is None else before) + 1, through + 1)


def _offset(value: Any) -> dict[str, Any] | None:
    """A source offset of Spark's progress: a JSON object, or its text ("null" for none)."""
    parsed = json.loads(value) if isinstance(value, str) else value
    return dict(parsed) if parsed else None


@dataclass
class FreshnessWindow:
    """The freshness samples of the batches of the last `window_s` seconds."""

    input_uri: str
    window_s: float = WINDOW_S
    _samples: deque[tuple[float, float]] = field(default_factory=deque)
    _last_batch: int = -1
    _first_end_s: float | None = None

    def record(self, progresses: Iterable[Mapping[str, Any]]) -> list[tuple[int, float]]:
        """Add the batches not seen yet (an idle query's progress, without a batch, adds none);
        the input versions they read and their freshness in seconds."""
        added = []
        for progress in progresses:
            batch = int(progress["batchId"])
            if batch <= self._last_batch or "addBatch" not in (progress.get("durationMs") or {}):
                continue
            self._last_batch = batch
            end = batch_end_s(progress)
            self._first_end_s = end if self._first_end_s is None else self._first_end_s
            for version in versions_read(progress):
                committed = commit_time_ms(self.input_uri, version)
                if committed is not None:
                    self._samples.append((end, end - committed / 1000))
                    added.append((version, end - committed / 1000))
        return added

    def figures(self, now_s: float) -> Freshness | None:
        """The window's percentiles at now_s; None without a sample in it."""
        while self._samples and self._samples[0][0] < now_s - self.window_s:
            self._samples.popleft()
        if not self._samples:
            return None
        values = np.fromiter((s for _, s in self._samples), dtype=float)
        first = self._first_end_s if self._first_end_s is not None else now_s
        return Freshness(
            p50_s=float(np.percentile(values, 50)),
            p99_s=float(np.percentile(values, 99)),
            max_s=float(values.max()),
            samples=len(values),
            window_s=min(self.window_s, max(0.0, now_s - first)),
        )
