"""The daily retraining of the anomaly model, as a Dagster asset.

Partition D trains on the days before D and is evaluated on D, held out (see
streaming/calls/anomaly/training.py). Days whose `expectations` check failed are left out of
training, and D itself waits for its blocking checks (automation: after_blocking_checks), so a bad
day is neither learned from nor judged on. Each version is stored in the lake with its window and
figures; the materialization shows them with a plot of baseline versus actual.

A date with nothing to learn from or to judge on (the first days of a lake) is not a failure:
the run succeeds without a materialization and records why as an observation of the model, so
the model's page keeps showing the newest good version and the Runs page stays green.
"""

import base64
from collections.abc import Iterator

import dagster as dg
from pydantic import Field

from tidelake.assets.quality.partition_checks import EXPECTATIONS
from tidelake.assets.tables.automation import after_blocking_checks
from tidelake.assets.tables.keys import daily_partitions, table_key
from tidelake.streaming.calls.anomaly.store import MODEL_TABLE, VERSIONS_TABLE
from tidelake.streaming.calls.anomaly.training import TrainingError, baseline_plot, train_model
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.spark.session import host_session
from tidelake.streaming.storage.location import Location
from tidelake.streaming.storage.uri import join

MODEL_KEY = dg.AssetKey(["models", "call_anomaly_model"])
PLOTS = "call_anomaly_model_plots"
SKIPPED = "skipped"
"""Metadata label of the observation a date without enough history records."""


class TrainingConfig(dg.Config):
    training_days: int = Field(
        default=28, ge=1, le=365, description="days before the partition's date to learn from"
    )


def build_anomaly_model_asset(flow: FlowSpec, settings: EngineSettings) -> dg.AssetsDefinition:
    lake = settings.lake

    @dg.asset(
        key=MODEL_KEY,
        deps=[table_key(flow)],
        partitions_def=daily_partitions(flow, settings),
        group_name="anomalies",
        kinds={"spark", "delta"},
        owners=list(flow.owners),
        required_resource_keys={"spark"},
        automation_condition=after_blocking_checks(),
        output_required=False,  # a date without history is skipped (module docstring)
        description="Baselines of calls per minute, failure rate and duration per account and "
        "region and hour of the week, trained on the days before the date and evaluated on the "
        "date with injected incidents. The streaming detector uses the newest version.",
        metadata={"dagster/uri": join(lake, MODEL_TABLE), "versions": join(lake, VERSIONS_TABLE)},
    )
    def call_anomaly_model(
        context: dg.AssetExecutionContext, config: TrainingConfig
    ) -> Iterator[dg.MaterializeResult | dg.AssetObservation]:
        day = context.partition_key
        excluded = failed_days(context.instance, flow)
        if excluded:
            context.log.info(f"left out of training (failed expectations): {sorted(excluded)}")
        try:
            with host_session(context.resources.spark) as spark:
                trained = train_model(spark, flow, settings, day, config.training_days, excluded)
        except TrainingError as exc:
            context.log.warning(f"no model for {day}: {exc}")
            yield dg.AssetObservation(
                asset_key=MODEL_KEY, partition=day, metadata={SKIPPED: str(exc)}
            )
            return
        png = baseline_plot(trained)
        plot_path = Location(join(lake, PLOTS, f"{trained.info.version}.png"))
        plot_path.write_bytes(png)
        info = trained.info
        yield dg.MaterializeResult(
            metadata={
                "model_version": dg.MetadataValue.int(info.version),
                "training_window": f"{info.train_start} .. {info.train_end}",
                "days_used": len(info.days_used),
                "days_excluded": dg.MetadataValue.json(info.days_excluded),
                "precision": info.metrics["precision"],
                "recall": info.metrics["recall"],
                "false_alert_share": info.metrics["false_alert_share"],
                "baselines": len(trained.baselines),
                "plot": dg.MetadataValue.md(
                    f"![baseline versus actual on {day}, injected incidents]"
                    f"(data:image/png;base64,{base64.b64encode(png).decode()})"
                ),
                "plot_file": dg.MetadataValue.path(str(plot_path)),
            }
        )

    return call_anomaly_model


def failed_days(instance: dg.DagsterInstance, flow: FlowSpec, limit: int = 1000) -> frozenset[str]:
    """Dates whose newest `expectations` check execution failed."""
    check = dg.AssetCheckKey(table_key(flow), EXPECTATIONS)
    newest: dict[str, str] = {}
    for record in instance.event_log_storage.get_asset_check_execution_history(check, limit=limit):
        if record.partition is not None:
            newest.setdefault(record.partition, record.status.value)  # newest first
    return frozenset(day for day, status in newest.items() if status == "FAILED")
