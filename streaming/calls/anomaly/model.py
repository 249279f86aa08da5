"""Baselines of call traffic per account and per region, and scoring minutes against them.

Every call counts once for its account and once for its region (a "key"). Per key and minute
the additive sums are: calls, failed, completed, and the sum and sum of squares of the log
duration of completed calls. The model holds, per key and hour of the week (0 = Monday 00:00
UTC ... 167), and per key over all hours (hour_of_week -1, the fallback), the expected calls
per minute (median over the training days of that hour's rate: one bad day does not move it),
its day-to-day spread (1.4826 x MAD), the pooled failure rate, and the mean and standard
deviation of log duration.

A minute is scored per metric with a z-score that accounts for how many calls it had: volume
against Poisson noise plus the day-to-day spread, failure rate against binomial noise, mean log
duration against its standard error. A minute is anomalous when |z| passes the threshold AND the
effect is large enough to matter (volume at most half or at least twice the expected, failure
rate at least twice, duration shifted by at least 35%), so a huge key cannot alert on a
statistically significant but harmless wobble.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

if TYPE_CHECKING:
    from tidelake.streaming.calls.anomaly.incidents import Incident

METRICS = ("volume", "failure_rate", "log_duration")
KEY_KINDS = {"account": "account_sid", "region": "region"}
WINDOW = "1 minute"
SUMS = ("calls", "failed", "completed", "log_duration_sum", "log_duration_sq_sum")
ALL_HOURS = -1


@dataclass(frozen=True)
class Thresholds:
    z: float = 4.0
    min_expected_calls: float = 5.0
    """Keys expected to have fewer calls per minute are not scored for volume."""
    min_calls: int = 8
    """Minutes with fewer calls (completed calls, for duration) are not scored for rates."""
    volume_ratio: float = 2.0
    failure_ratio: float = 2.0
    duration_shift: float = 0.3
    """In log units: about 35% longer or 26% shorter."""


def minute_windows(events: DataFrame, watermark: str | None = None) -> DataFrame:
    """Per minute (window_start), key_kind and key: the sums of the module docstring.

    For a stream, pass the watermark delay: windows are emitted once it has passed them.
    """
    keys = F.explode(
        F.array(
            *(
                F.struct(F.lit(kind).alias("key_kind"), F.col(column).alias("key"))
                for kind, column in KEY_KINDS.items()
            )
        )
    )
    completed = F.col("call_state") == "completed"
    log_duration = F.log(F.greatest(F.col("duration"), F.lit(1)).cast("double"))
    if watermark is not None:
        events = events.withWatermark("event_time", watermark)
    return (
        events.withColumn("k", keys)
        .groupBy(F.window("event_time", WINDOW).alias("window"), "k.key_kind", "k.key")
        .agg(
            F.count(F.lit(1)).alias("calls"),
            F.sum((F.col("call_state") == "failed").cast("long")).alias("failed"),
            F.sum(completed.cast("long")).alias("completed"),
            F.sum(F.when(completed, log_duration).otherwise(0.0)).alias("log_duration_sum"),
            F.sum(F.when(completed, log_duration * log_duration).otherwise(0.0)).alias(
                "log_duration_sq_sum"
            ),
        )
        .select(F.col("window.start").alias("window_start"), "key_kind", "key", *SUMS)
    )


def train_baselines(windows: DataFrame) -> DataFrame:
    """The model's rows from minute windows of the training days (see the module docstring)."""
    hours = windows.withColumn("hour", F.date_trunc("hour", "window_start"))
    # minutes of each hour in which anything at all happened: the data's coverage of the hour
    coverage = hours.groupBy("hour").agg(F.countDistinct("window_start").alias("minutes"))
    keys = hours.select("key_kind", "key").distinct()
    hourly = (
        hours.groupBy("key_kind", "key", "hour")
        .agg(*(F.sum(c).alias(c) for c in SUMS))
        .join(keys.crossJoin(coverage), ["key_kind", "key", "hour"], "right")
        .fillna(0, subset=list(SUMS))
        .withColumn("rate", F.col("calls") / F.col("minutes"))
        .withColumn(
            "hour_of_week",
            ((F.dayofweek("hour") + 5) % 7) * 24 + F.hour("hour"),  # Monday 00:00 = 0
        )
    )
    slots = hourly.unionByName(hourly.withColumn("hour_of_week", F.lit(ALL_HOURS)))
    by_slot = ["key_kind", "key", "hour_of_week"]
    medians = slots.groupBy(*by_slot).agg(
        F.median("rate").alias("expected_calls"),
        *(F.sum(c).alias(c) for c in SUMS),
        F.count(F.lit(1)).alias("training_hours"),
    )
    spread = (
        slots.join(medians.select(*by_slot, "expected_calls"), by_slot)
        .groupBy(*by_slot)
        .agg(F.median(F.abs(F.col("rate") - F.col("expected_calls"))).alias("mad"))
    )
    mean_log = F.try_divide(F.col("log_duration_sum"), F.col("completed"))  # null: none
    return (
        medians.join(spread, by_slot)
        .select(
            *by_slot,
            "expected_calls",
            (F.col("mad") * 1.4826).alias("calls_spread"),
            (F.col("failed") / F.greatest(F.col("calls"), F.lit(1))).alias("failure_rate"),
            mean_log.alias("log_duration_mean"),
            F.sqrt(
                F.greatest(
                    F.try_divide(F.col("log_duration_sq_sum"), F.col("completed")) - mean_log**2,
                    F.lit(0),
                )
            ).alias("log_duration_sd"),
            "calls",
            "training_hours",
        )
        .fillna(0.0, subset=["log_duration_mean", "log_duration_sd"])
    )


def hour_of_week(window_start: pd.Series) -> pd.Series:
    ts = pd.to_datetime(window_start, utc=True)
    return ts.dt.dayofweek * 24 + ts.dt.hour


def with_silent_keys(
    windows: pd.DataFrame, baselines: pd.DataFrame, thresholds: Thresholds
) -> pd.DataFrame:
    """Add zero rows for keys that usually have calls but had none in a minute of the batch: a
    volume drop to zero leaves no window behind."""
    if windows.empty:
        return windows
    busy = baselines[
        (baselines["hour_of_week"] == ALL_HOURS)
        & (baselines["expected_calls"] >= thresholds.min_expected_calls)
    ][["key_kind", "key"]]
    minutes = windows[["window_start"]].drop_duplicates()
    expected = minutes.merge(busy, how="cross")
    merged = expected.merge(windows, on=["window_start", "key_kind", "key"], how="outer")
    return merged.fillna({c: 0 for c in SUMS})


def score_windows(
    windows: pd.DataFrame, baselines: pd.DataFrame, thresholds: Thresholds | None = None
) -> pd.DataFrame:
    """Anomalies of the windows: key_kind, key, window_start, metric, observed, expected, score.

    `windows` has window_start, key_kind, key and the sums; `baselines` the model's rows.
    """
    columns = ["key_kind", "key", "window_start", "metric", "observed", "expected", "score"]
    if windows.empty or baselines.empty:
        return pd.DataFrame(columns=columns)
    w = windows.copy()
    w["hour_of_week"] = hour_of_week(w["window_start"])
    base = baselines.drop(columns=[c for c in ("calls", "training_hours") if c in baselines])
    slot = w.merge(base, on=["key_kind", "key", "hour_of_week"], how="left")
    fallback = w.merge(
        base[base["hour_of_week"] == ALL_HOURS].drop(columns="hour_of_week"),
        on=["key_kind", "key"],
        how="left",
    )
    s = slot.where(slot["expected_calls"].notna(), fallback).reset_index(drop=True)
    s = s[s["expected_calls"].notna()]
    if s.empty:
        return pd.DataFrame(columns=columns)
    t = thresholds or Thresholds()
    found = []

    calls, expected = s["calls"].to_numpy(float), s["expected_calls"].to_numpy(float)
    spread = s["calls_spread"].to_numpy(float)
    z = (calls - expected) / np.sqrt(expected + spread**2 + 1e-9)
    ratio_off = (calls <= expected / t.volume_ratio) | (calls >= expected * t.volume_ratio)
    hit = (np.abs(z) >= t.z) & ratio_off & (expected >= t.min_expected_calls)
    found.append(_rows(s, hit, "volume", calls, expected, z))

    p = np.clip(s["failure_rate"].to_numpy(float), 0.005, 0.995)
    failed = s["failed"].to_numpy(float)
    observed = failed / np.maximum(calls, 1)
    z = (failed - calls * p) / np.sqrt(calls * p * (1 - p) + 1e-9)
    hit = (z >= t.z) & (observed >= p * t.failure_ratio) & (calls >= t.min_calls)
    found.append(_rows(s, hit, "failure_rate", observed, p, z))

    completed = s["completed"].to_numpy(float)
    mean = s["log_duration_sum"].to_numpy(float) / np.maximum(completed, 1)
    mu, sd = s["log_duration_mean"].to_numpy(float), s["log_duration_sd"].to_numpy(float)
    z = (mean - mu) / (np.maximum(sd, 0.05) / np.sqrt(np.maximum(completed, 1)))
    hit = (np.abs(z) >= t.z) & (np.abs(mean - mu) >= t.duration_shift) & (completed >= t.min_calls)
    found.append(_rows(s, hit, "log_duration", mean, mu, z))
    return pd.concat(found, ignore_index=True)[columns]


def _rows(
    s: pd.DataFrame, hit: np.ndarray, metric: str, observed: Any, expected: Any, z: Any
) -> pd.DataFrame:
    out = s.loc[hit, ["key_kind", "key", "window_start"]].copy()
    out["metric"] = metric
    out["observed"] = np.asarray(observed)[hit]
    out["expected"] = np.asarray(expected)[hit]
    out["score"] = np.asarray(z)[hit]
    return out


@dataclass(frozen=True)
class Evaluation:
    """Detection quality on a scenario with known incidents, counted per (key, minute, metric)."""

    true_positives: int
    false_positives: int
    incident_windows: int
    normal_windows: int
    alerted_normal_windows: int

    @property
    def precision(self) -> float:
        alerts = self.true_positives + self.false_positives
        return self.true_positives / alerts if alerts else 1.0

    @property
    def recall(self) -> float:
        return self.true_positives / self.incident_windows if self.incident_windows else 1.0

    @property
    def false_alert_share(self) -> float:
        """Share of normal (key, minute) windows that raised any alert."""
        return self.alerted_normal_windows / self.normal_windows if self.normal_windows else 0.0


@dataclass(frozen=True)
class IncidentTruth:
    """What a scenario's incidents should raise: (key_kind, key, window_start, metric) for each
    whole minute of each incident; and (key_kind, window_start) of the other kind of key in those
    minutes, which an incident moves too (an account's failures raise its regions' failure
    rate), so alerts there count neither way."""

    windows: frozenset[tuple[Any, ...]]
    collateral: frozenset[tuple[Any, ...]]

    @classmethod
    def of(cls, incidents: Iterable[Incident], keys_of: dict[str, str]) -> IncidentTruth:
        """`keys_of` maps an incident key to its key_kind (account or region)."""
        windows, collateral = set(), set()
        for incident in incidents:
            kind = keys_of[incident.key]
            other = next(k for k in KEY_KINDS if k != kind)
            first = math.ceil(incident.start_ms / 60_000) * 60_000
            for minute_ms in range(first, incident.end_ms - 59_999, 60_000):
                minute = pd.Timestamp(minute_ms, unit="ms", tz="UTC")
                windows.add((kind, incident.key, minute, incident.metric))
                collateral.add((other, minute))
        return cls(frozenset(windows), frozenset(collateral))


def evaluate(anomalies: pd.DataFrame, windows: pd.DataFrame, truth: IncidentTruth) -> Evaluation:
    """Compare anomalies with what the incidents should raise, per (key, minute, metric).

    Another metric's alert in an incident's window counts neither way (a failure spike also
    changes the remaining calls' mean duration), nor does an alert in its collateral.
    """
    alerts = {(r.key_kind, r.key, _utc(r.window_start), r.metric) for r in anomalies.itertuples()}
    touched = {t[:3] for t in truth.windows}

    def ignored(window: tuple[Any, ...]) -> bool:
        return window in touched or (window[0], window[2]) in truth.collateral

    tp = len(alerts & truth.windows)
    fp = len({a for a in alerts - truth.windows if not ignored(a[:3])})
    normal = {
        w
        for w in ((r.key_kind, r.key, _utc(r.window_start)) for r in windows.itertuples())
        if not ignored(w)
    }
    alerted_normal = {a[:3] for a in alerts} & normal
    return Evaluation(tp, fp, len(truth.windows), len(normal), len(alerted_normal))


def inject_incidents(
    windows: pd.DataFrame, incidents: Iterable[Incident], seed: int
) -> pd.DataFrame:
    """Held-out windows as the incidents would have changed them (same semantics as
    demo_events.with_incidents, applied to the sums): failure_spike fails half the completed
    calls, volume_drop keeps a fifth of the calls, duration_shift makes calls 3 times longer."""
    rng = np.random.default_rng(seed)
    out = windows.copy()
    start_ms = (
        pd.to_datetime(out["window_start"], utc=True).astype("int64") // 1_000_000
    ).to_numpy()
    for incident in incidents:
        rows = (
            (out["key"] == incident.key).to_numpy()
            & (start_ms >= incident.start_ms)
            & (start_ms + 60_000 <= incident.end_ms)
        )
        if not rows.any():
            continue
        completed = out.loc[rows, "completed"].to_numpy(float)
        if incident.kind == "failure_spike":
            extra = rng.binomial(completed.astype(int), 0.5)
            out.loc[rows, "failed"] += extra
            out.loc[rows, "completed"] -= extra
            keep = (completed - extra) / np.maximum(completed, 1)
            for column in ("log_duration_sum", "log_duration_sq_sum"):
                out.loc[rows, column] *= keep
        elif incident.kind == "volume_drop":
            calls = out.loc[rows, "calls"].to_numpy(float)
            kept = rng.binomial(calls.astype(int), 0.2)
            share = kept / np.maximum(calls, 1)
            out.loc[rows, "calls"] = kept
            for column in ("failed", "completed"):
                out.loc[rows, column] = np.round(out.loc[rows, column].to_numpy(float) * share)
            for column in ("log_duration_sum", "log_duration_sq_sum"):
                out.loc[rows, column] *= share
        else:  # duration_shift: log durations move by ln 3
            shift = math.log(3)
            total = out.loc[rows, "log_duration_sum"].to_numpy(float)
            out.loc[rows, "log_duration_sq_sum"] += 2 * shift * total + completed * shift**2
            out.loc[rows, "log_duration_sum"] = total + completed * shift
    return out


def _utc(value: Any) -> pd.Timestamp:
    """Spark hands timestamps to pandas as naive UTC (the session's time zone)."""
    ts = pd.Timestamp(value)
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
