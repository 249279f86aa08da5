"""The stream's micro-batches, from its progress log (TIDELAKE_PROGRESS_LOG): durations, commit
and eviction times, the deduplication state's rows, memory and RocksDB costs, per sample."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from common import state_cost


class BatchReader:
    """Follows the progress log (and its rotations) from where it last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._inode: int | None = None
        self._partial = ""

    def new_batches(self) -> list[dict[str, Any]]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return []
        lines: list[str] = []
        if self._inode is not None and stat.st_ino != self._inode:  # rotated: finish the old
            rotated = self.path.with_name(self.path.name + ".1")
            if rotated.exists():
                lines += self._read(rotated, self._offset)
            self._offset, self._partial = 0, ""
        self._inode = stat.st_ino
        lines += self._read(self.path, self._offset)
        return [json.loads(line) for line in lines if line.strip()]

    def _read(self, path: Path, offset: int) -> list[str]:
        with path.open() as f:
            f.seek(offset)
            text = self._partial + f.read()
            self._offset = f.tell()
        *whole, self._partial = text.split("\n")
        return whole


def batch_cost_fit(batches: list[dict[str, Any]]) -> dict[str, float]:
    """A micro-batch's duration split into what it costs whatever its size and what each row
    adds: the least-squares line of duration against input rows over some batches. A stream that
    runs back to back reads in each batch what arrived during the one before, so its duration is
    fixed / (1 - per_row * rate) and a rise of either shows amplified; this says which rose."""
    rows = np.array([b.get("numInputRows", 0) for b in batches], dtype=float)
    duration = np.array([b["durationMs"].get("triggerExecution", 0) for b in batches], dtype=float)
    if len(batches) < 10 or np.ptp(rows) < 0.2 * np.median(rows):  # too few or too alike
        return {"batch_fixed_ms": np.nan, "batch_ms_per_krow": np.nan}
    per_row, fixed = np.polyfit(rows, duration, 1)
    return {"batch_fixed_ms": float(fixed), "batch_ms_per_krow": float(1000 * per_row)}


def batch_figures(batches: list[dict[str, Any]]) -> dict[str, float]:
    """Medians and maxima of one sample's micro-batches."""
    if not batches:
        return {}
    duration = [b["durationMs"].get("triggerExecution", 0) for b in batches]
    state = [b["stateOperators"][0] for b in batches if b.get("stateOperators")]
    # allRemovalsTimeMs is task time summed over the state partitions, which run side by side
    # (one task per core): the eviction's share of the batch's wall time is about the sum / their
    # number
    eviction = [s.get("allRemovalsTimeMs", 0) for s in state]
    eviction_wall = [
        e / max(1, s.get("numStateStoreInstances", 1)) for e, s in zip(eviction, state, strict=True)
    ]
    commit = [b["tidelake"].get("commit_ms", np.nan) for b in batches]
    write = [b["tidelake"].get("write_ms", np.nan) for b in batches]
    out = {
        "batches": len(batches),
        "rows_in": sum(b.get("numInputRows", 0) for b in batches),
        "batch_ms_p50": float(np.median(duration)),
        "batch_ms_max": float(np.max(duration)),
        "commit_ms_p50": float(np.nanmedian(commit)) if not np.all(np.isnan(commit)) else np.nan,
        "write_ms_p50": float(np.nanmedian(write)) if not np.all(np.isnan(write)) else np.nan,
        "planning_ms_p50": float(
            np.median([b["durationMs"].get("queryPlanning", 0) for b in batches])
        ),
    }
    out |= batch_cost_fit(batches)
    if state:
        last = state[-1]
        out["state_commit_ms_p50"] = float(np.median([s.get("commitTimeMs", 0) for s in state]))
        metrics = last.get("customMetrics") or {}
        every = [s.get("customMetrics") or {} for s in state]

        def total(metric: str) -> float:
            """A RocksDB metric summed over the sample's batches (each reports its own)."""
            return float(sum(m.get(metric, 0) for m in every))

        out |= state_cost(
            rows=out["rows_in"],
            updates_ms=sum(s.get("allUpdatesTimeMs", 0) for s in state),
            gets=int(total("rocksdbGetCount")),
            get_ms=total("rocksdbGetLatency"),
        )
        puts = total("rocksdbPutCount")
        rows_k = max(1, out["rows_in"]) / 1000
        out |= {
            # RocksDB's own work per row, behind the state's task time: a put's latency, what
            # its background compactions rewrite and how long writes were stalled for them
            "rocksdb_put_us": 1000 * total("rocksdbPutLatency") / puts if puts else np.nan,
            "compaction_written_kb_per_krow": (
                total("rocksdbTotalBytesWrittenByCompaction") / 1024 / rows_k
            ),
            "compaction_ms_per_krow": total("rocksdbTotalCompactionLatencyMs") / rows_k,
            "writer_stall_ms": total("rocksdbWriterStallLatencyMs"),
            "eviction_ms_p50": float(np.median(eviction)),
            "batch_less_eviction_ms_p50": float(
                np.median([d - e for d, e in zip(duration, eviction_wall, strict=False)])
            ),
            "state_rows": float(last.get("numRowsTotal", 0)),
            "state_memory_mb": last.get("memoryUsedBytes", 0) / 2**20,
            "state_sst_mb": metrics.get("rocksdbSstFileSize", 0) / 2**20,
        }
    return out
