"""The freshness a use case's run reports (streaming/usecase/freshness.py): which input versions a
batch read, from Spark's progress of it, and the last hour's percentiles, over a real Delta log
written by delta-rs."""

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake

from tidelake.streaming.usecase.freshness import FreshnessWindow, versions_read
from tidelake.streaming.usecase.position import commit_time_ms


def progress(batch: int, start: int | None, end: int, ended_s: float) -> dict[str, Any]:
    """Spark's progress of a batch that read input versions up to `end` - 1 (Delta's offset
    moves to the next version once one is read to its end) and ended at `ended_s`."""

    def offset(version: int) -> str:
        return json.dumps({"reservoirVersion": version, "index": -1, "isStartingVersion": False})

    return {
        "batchId": batch,
        "timestamp": datetime.fromtimestamp(ended_s - 0.5, UTC).isoformat(),
        "durationMs": {"addBatch": 400, "triggerExecution": 500},
        "sources": [
            {"startOffset": "null" if start is None else offset(start), "endOffset": offset(end)}
        ],
    }


def test_a_batch_reads_the_versions_between_its_offsets_and_a_first_batch_none() -> None:
    assert list(versions_read(progress(0, None, 3, 0.0))) == []
    assert list(versions_read(progress(1, 3, 6, 0.0))) == [3, 4, 5]
    idle = progress(2, 6, 6, 0.0)
    assert list(versions_read(idle)) == []


def test_the_window_keeps_the_last_hour_of_each_versions_freshness(tmp_path: Path) -> None:
    uri = str(tmp_path / "input")
    for _ in range(4):  # versions 0-3
        write_deltalake(uri, pa.table({"n": [1]}), mode="append")
    committed = {v: (commit_time_ms(uri, v) or 0) / 1000 for v in range(4)}
    window = FreshnessWindow(uri)
    first = window.record([progress(0, None, 1, committed[0] + 9.0)])
    assert first == []  # the first batch reads the input as it stood
    added = window.record(
        [progress(1, 1, 3, committed[2] + 2.0), progress(1, 1, 3, committed[2] + 2.0)]
    )
    assert [v for v, _ in added] == [1, 2]  # a batch's progress seen twice counts once
    assert abs(dict(added)[2] - 2.0) < 1e-3
    later = committed[3] + 4000.0  # more than an hour after the first two
    window.record([progress(2, 3, 4, later)])
    figures = window.figures(later)
    assert figures is not None and figures.samples == 1
    assert abs(figures.p50_s - (later - committed[3])) < 1e-3
    assert window.figures(later + 3601.0) is None
