"""Durable versions of the anomaly model: Delta tables in the lake, written and read by delta-rs.

`<lake>/call_anomaly_model` holds the baselines of every version (partitioned by version);
`<lake>/call_anomaly_model_versions` holds one row per version: the date it is for, training
window, days used and excluded, evaluation figures. A version exists once its row is committed
(after its baselines), so a reader never sees half a model. Versions are the training time in
epoch milliseconds.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field

import pandas as pd
import pyarrow as pa
from deltalake.exceptions import TableNotFoundError

from tidelake.streaming.delta.tables import open_table, write_table
from tidelake.streaming.storage.uri import join

MODEL_TABLE = "call_anomaly_model"
VERSIONS_TABLE = "call_anomaly_model_versions"


@dataclass(frozen=True)
class ModelInfo:
    version: int
    train_start: str
    train_end: str
    days_used: list[str]
    days_excluded: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    """Evaluation on the held-out synthetic scenario: precision, recall, false_alert_share."""
    day: str = ""
    """The date the model was made for (and evaluated on); the newest model is the one for the
    latest date, then the latest trained, so retraining an old date does not replace it."""


def save_model(lake: str, baselines: pd.DataFrame, info: ModelInfo) -> None:
    """Append a version: its baselines first, then its row in the versions table."""
    rows = baselines.assign(version=info.version)
    write_table(
        join(lake, MODEL_TABLE),
        pa.Table.from_pandas(rows, preserve_index=False),
        mode="append",
        partition_by=["version"],
    )
    row = asdict(info) | {
        "days_used": json.dumps(info.days_used),
        "days_excluded": json.dumps(info.days_excluded),
        "metrics": json.dumps(info.metrics),
        "trained_at": pd.Timestamp(info.version, unit="ms", tz="UTC"),
    }
    write_table(join(lake, VERSIONS_TABLE), pa.Table.from_pylist([row]), mode="append")


def new_version() -> int:
    return time.time_ns() // 1_000_000


def latest_model(lake: str) -> tuple[ModelInfo, pd.DataFrame] | None:
    """The newest committed version and its baselines, or None before the first training."""
    try:
        versions = open_table(join(lake, VERSIONS_TABLE)).to_pyarrow_table().to_pylist()
    except TableNotFoundError:
        return None
    if not versions:
        return None
    newest = max(versions, key=lambda r: (r["day"], r["version"]))
    info = ModelInfo(
        day=newest["day"],
        version=newest["version"],
        train_start=newest["train_start"],
        train_end=newest["train_end"],
        days_used=json.loads(newest["days_used"]),
        days_excluded=json.loads(newest["days_excluded"]),
        metrics=json.loads(newest["metrics"]),
    )
    baselines = (
        open_table(join(lake, MODEL_TABLE))
        .to_pyarrow_table(partitions=[("version", "=", str(info.version))])
        .to_pandas()
        .drop(columns="version")
    )
    return info, baselines


class ModelCache:
    """The newest model, re-read only when the versions table has a new commit."""

    def __init__(self, lake: str):
        self._lake = str(lake)
        self._seen_table_version: int | None = None
        self._model: tuple[ModelInfo, pd.DataFrame] | None = None
        self._lock = threading.Lock()

    def current(self) -> tuple[ModelInfo, pd.DataFrame] | None:
        with self._lock:
            try:
                table_version = open_table(join(self._lake, VERSIONS_TABLE)).version()
            except TableNotFoundError:
                return None
            if table_version != self._seen_table_version:
                self._model = latest_model(self._lake)
                self._seen_table_version = table_version
            return self._model
