"""Training one version of the anomaly model from the lake, and measuring it before it is used.

The model for date D learns from the days before D (up to `training_days`, minus days excluded
because their quality checks failed) and is evaluated on D itself, held out: D's real minute
windows, with three incidents injected at known times (a failure spike on the busiest account, a
volume drop on the busiest region, a duration shift on the second-busiest account). Precision,
recall and the share of normal windows that alert are stored with the version.

Spark reads exactly the files of the table's current snapshot (delta-rs lists them), so no Delta
jars are needed.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import pandas as pd
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from tidelake.streaming.calls.anomaly.incidents import Incident
from tidelake.streaming.calls.anomaly.model import (
    ALL_HOURS,
    Evaluation,
    IncidentTruth,
    Thresholds,
    evaluate,
    inject_incidents,
    minute_windows,
    score_windows,
    train_baselines,
    with_silent_keys,
)
from tidelake.streaming.calls.anomaly.store import ModelInfo, new_version, save_model
from tidelake.streaming.delta.progress import table_progress
from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.errors import TidelakeError
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings

log = logging.getLogger(__name__)

EVENT_COLUMNS = ["event_time", "account_sid", "region", "call_state", "duration"]
THIN_DAY_SHARE = 0.25
"""Training days with fewer rows than this share of the held-out day's are left out."""


class TrainingError(TidelakeError, RuntimeError):
    """There is nothing (or not enough) to learn from; the message says what is missing."""


@dataclass(frozen=True)
class TrainedModel:
    info: ModelInfo
    baselines: pd.DataFrame
    evaluation: Evaluation
    held_out: pd.DataFrame
    """The held-out day's windows with the injected incidents, scored for the plot."""
    anomalies: pd.DataFrame


def train_model(
    spark: SparkSession,
    flow: FlowSpec,
    settings: EngineSettings,
    day: str,
    training_days: int = 28,
    excluded: frozenset[str] = frozenset(),
    thresholds: Thresholds | None = None,
) -> TrainedModel:
    """Train on the days before `day`, evaluate on `day`, and store the version."""
    thresholds = thresholds or Thresholds()
    uri = settings.table_uri(flow.table)
    table = open_table(uri)
    held_out_day = date.fromisoformat(day)
    window = [(held_out_day - timedelta(days=n)).isoformat() for n in range(training_days, 0, -1)]
    progress = table_progress(uri, flow)
    rows = progress.rows_by_date if progress is not None else {}
    if not rows.get(day):
        raise TrainingError(f"{day} has no rows in {flow.table} to evaluate the model on")
    # a day with a fraction of the usual rows is partial (before the data began) or broken
    thin = {d for d in window if 0 < rows.get(d, 0) < THIN_DAY_SHARE * rows[day]}
    used = [d for d in window if rows.get(d) and d not in excluded and d not in thin]
    if not used:
        raise TrainingError(
            f"no day of {flow.table} between {window[0]} and {window[-1]} to learn from "
            f"(days with data: {sorted(rows)[-5:] or 'none'}; excluded: {sorted(excluded)}; "
            f"thin: {sorted(thin)})"
        )

    baselines = train_baselines(minute_windows(_events(spark, table, flow, used))).toPandas()
    held_out = minute_windows(_events(spark, table, flow, [day])).toPandas()
    incidents, keys_of = _incidents(baselines, held_out_day)
    held_out = with_silent_keys(
        inject_incidents(held_out, incidents, seed=7), baselines, thresholds
    )
    anomalies = score_windows(held_out, baselines, thresholds)
    evaluation = evaluate(anomalies, held_out, IncidentTruth.of(incidents, keys_of))
    info = ModelInfo(
        version=new_version(),
        train_start=used[0],
        train_end=used[-1],
        days_used=used,
        days_excluded=sorted(d for d in window if d in excluded or d in thin),
        day=day,
        metrics={
            "precision": round(evaluation.precision, 4),
            "recall": round(evaluation.recall, 4),
            "false_alert_share": round(evaluation.false_alert_share, 5),
        },
    )
    save_model(settings.lake, baselines, info)
    log.info("model version %d from %s..%s: %s", info.version, used[0], used[-1], info.metrics)
    return TrainedModel(info, baselines, evaluation, held_out, anomalies)


def _events(spark: SparkSession, table: DeltaTable, flow: FlowSpec, days: list[str]) -> DataFrame:
    files = table.file_uris(partition_filters=[(flow.partition_column, "in", days)])
    return spark.read.parquet(*files).select(*EVENT_COLUMNS)


def _incidents(baselines: pd.DataFrame, day: date) -> tuple[list[Incident], dict[str, str]]:
    overall = baselines[baselines["hour_of_week"] == ALL_HOURS]
    accounts = overall[overall["key_kind"] == "account"].nlargest(2, "expected_calls")["key"]
    regions = overall[overall["key_kind"] == "region"].nlargest(1, "expected_calls")["key"]
    if len(accounts) < 2 or len(regions) < 1:
        raise TrainingError("the training days have fewer than two accounts or no region")
    start = datetime.combine(day, datetime.min.time(), UTC)

    def at(hour: int, minutes: int) -> tuple[int, int]:
        first = int((start + timedelta(hours=hour)).timestamp() * 1000)
        return first, first + minutes * 60_000

    incidents = [
        Incident("failure_spike", accounts.iloc[0], *at(4, 30)),
        Incident("volume_drop", regions.iloc[0], *at(12, 30)),
        Incident("duration_shift", accounts.iloc[1], *at(18, 30)),
    ]
    keys_of = {accounts.iloc[0]: "account", accounts.iloc[1]: "account", regions.iloc[0]: "region"}
    return incidents, keys_of


def baseline_plot(trained: TrainedModel, keys: int = 3) -> bytes:
    """PNG: observed versus expected calls per minute, over the held-out day, for the keys with
    the strongest anomalies (or the busiest, if none)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    anomalies = trained.anomalies
    if anomalies.empty:
        overall = trained.baselines[trained.baselines["hour_of_week"] == ALL_HOURS]
        chosen = overall.nlargest(keys, "expected_calls")[["key_kind", "key"]]
    else:
        ranked = anomalies.assign(strength=anomalies["score"].abs())
        chosen = (
            ranked.sort_values("strength", ascending=False)
            .drop_duplicates(["key_kind", "key"])
            .head(keys)[["key_kind", "key"]]
        )
    figure, axes = plt.subplots(len(chosen), 1, figsize=(9, 2.6 * len(chosen)), squeeze=False)
    base = trained.baselines
    for ax, (kind, key) in zip(axes[:, 0], chosen.itertuples(index=False), strict=True):
        w = trained.held_out[
            (trained.held_out["key_kind"] == kind) & (trained.held_out["key"] == key)
        ]
        w = w.sort_values("window_start")
        expected = base[
            (base["key_kind"] == kind) & (base["key"] == key) & (base["hour_of_week"] == ALL_HOURS)
        ]
        times = pd.to_datetime(w["window_start"], utc=True)
        ax.plot(times, w["calls"], lw=0.8, label="calls per minute")
        if not expected.empty:
            ax.axhline(
                float(expected["expected_calls"].iloc[0]), color="tab:orange", label="expected"
            )
        hits = anomalies[(anomalies["key_kind"] == kind) & (anomalies["key"] == key)]
        if not hits.empty:
            ax.scatter(
                pd.to_datetime(hits["window_start"], utc=True),
                w.set_index(times)["calls"].reindex(pd.to_datetime(hits["window_start"], utc=True)),
                color="tab:red",
                s=10,
                label="anomaly",
                zorder=3,
            )
        ax.set_title(f"{kind} {key}", fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    plt.close(figure)
    return buffer.getvalue()
