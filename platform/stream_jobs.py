"""Always-on streams as Dagster runs: one job per flow whose single op runs the flow's query.

The op blocks until the run is terminated. Terminating from the UI sends the run worker SIGINT;
the op then stops the query between batches, so the checkpoint stays consistent, and ends the
run as canceled. Progress goes to the run's log and to observations of the table asset.
"""

import os
from collections.abc import Callable
from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pydantic import Field
from pyspark.sql.streaming import StreamingQuery

from tidelake.assets.dagster_failures import step_failure
from tidelake.assets.flow_keys import table_key
from tidelake.platform.flow_assets import STREAM_TAG
from tidelake.platform.resources import KafkaResource
from tidelake.streaming.dedup import rows_dropped_by_watermark
from tidelake.streaming.flow_spec import FlowSpec
from tidelake.streaming.flow_stream import FlowStream, ProgressHandler, await_query
from tidelake.streaming.kafka_offsets import KafkaSourceError, from_json_offsets
from tidelake.streaming.runner import graceful_stop_signals
from tidelake.streaming.session import host_session
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.stream_status import kafka_ends, stream_lag


class StreamRunConfig(dg.Config):
    """Per-run knobs of a stream; defaults come from TIDELAKE_* settings."""

    max_offsets_per_trigger: int | None = Field(
        default=None, ge=1, description="records per micro-batch at most"
    )
    trigger_interval: str | None = Field(
        default=None, description='processing-time trigger, e.g. "5 seconds"'
    )
    progress_interval_s: float = Field(
        default=30.0,
        gt=0,
        le=120,
        description="seconds between progress reports; they are the run's heartbeat, and the "
        "supervisor replaces a run silent for 300 s",
    )


def stream_job_name(flow: FlowSpec) -> str:
    return f"{flow.name}_stream"


def build_stream_job(flow: FlowSpec, settings: EngineSettings) -> dg.JobDefinition:
    """The job whose run is the flow's always-on stream."""

    @dg.op(
        name=f"run_{flow.name}_stream",
        description=f"Streams Kafka topic {flow.topic!r} into Delta table {flow.table!r} "
        "until the run is terminated.",
        tags={"dagster/kind/spark": "", "dagster/kind/kafka": ""},
    )
    def run_stream(
        context: dg.OpExecutionContext,
        config: StreamRunConfig,
        kafka: KafkaResource,
        spark: LazyPySparkResource,
    ) -> None:
        run_settings = settings.model_copy(
            update={
                k: v
                for k, v in {
                    "max_offsets_per_trigger": config.max_offsets_per_trigger,
                    "trigger_interval": config.trigger_interval,
                }.items()
                if v is not None
            }
        )
        conf = kafka.client_config()
        stream = FlowStream(flow, run_settings, conf)
        with step_failure():
            stream.preflight()
        context.log.info(
            f"stream worker pid {os.getpid()}: {flow.topic} -> {stream.table_uri} "
            f"(checkpoint {stream.checkpoint})"
        )
        reporter = ProgressReporter(context, flow, conf)
        with host_session(lambda: spark.spark_session, run_settings.spark_master) as session:
            run_until_stopped(
                context,
                lambda: stream.start(session),
                config.progress_interval_s,
                reporter,
                stream.explain_failure,
            )

    @dg.job(
        name=stream_job_name(flow),
        description=f"The always-on stream of flow {flow.name}; its supervisor sensor keeps "
        "exactly one run alive. Stop the sensor before terminating a run to keep it stopped.",
        tags={
            STREAM_TAG: flow.name,
            # restarts are the supervisor's job (with back-off), not the run-retry daemon's
            "dagster/max_retries": "0",
        },
        executor_def=dg.in_process_executor,
    )
    def stream_job() -> None:
        run_stream()

    return stream_job


def run_until_stopped(
    context: dg.OpExecutionContext,
    start: Callable[[], StreamingQuery],
    progress_interval_s: float,
    on_progress: ProgressHandler,
    explain: Callable[[str], str] = str,
) -> None:
    """Run a query in an op until the run is terminated (SIGINT/SIGTERM: stop between batches,
    end the run canceled) or the query fails (a Failure with its error)."""
    with graceful_stop_signals() as stop:
        query = start()
        with step_failure():
            await_query(query, stop, progress_interval_s, on_progress, explain)
    if stop.is_set():
        context.log.info("stream stopped gracefully; checkpoint is consistent")
        raise dg.DagsterExecutionInterruptedError()


class ProgressReporter:
    """Logs the query's progress and records it as an observation of the table asset."""

    def __init__(self, context: dg.OpExecutionContext, flow: FlowSpec, kafka_conf: dict[str, str]):
        self._context = context
        self._flow = flow
        self._kafka_conf = kafka_conf
        self._reported_batch = -1
        self.rows_dropped_by_watermark = 0

    def __call__(self, query: StreamingQuery, progress: dict[str, Any] | None) -> None:
        if progress is None:
            self._context.log.info(f"{query.name}: started, waiting for the first batch")
            return
        lag = self._lag(progress)
        batch = progress["batchId"]
        rows = progress["numInputRows"]
        rate_in = progress.get("inputRowsPerSecond") or 0.0
        rate_done = progress.get("processedRowsPerSecond") or 0.0
        self._context.log.info(
            f"{query.name} batch {batch}: {rows} rows, {rate_in:.0f} rows/s in, "
            f"{rate_done:.0f} rows/s processed, lag {'?' if lag is None else lag}"
        )
        metadata: dict[str, Any] = {
            "batch_id": dg.MetadataValue.int(batch),
            "batch_rows": dg.MetadataValue.int(rows),
            "input_rows_per_second": dg.MetadataValue.float(round(rate_in, 1)),
            "processed_rows_per_second": dg.MetadataValue.float(round(rate_done, 1)),
            "batch_duration_ms": dg.MetadataValue.int(
                int(progress.get("durationMs", {}).get("triggerExecution", 0))
            ),
        }
        if lag is not None:
            metadata["lag_total"] = dg.MetadataValue.int(lag)
        dropped = self._dropped_since_last_report(query, batch)
        if dropped:
            self._context.log.warning(
                f"{query.name}: {dropped} records arrived more than the allowed lateness behind "
                "the others and were dropped by the deduplication watermark"
            )
        self.rows_dropped_by_watermark += dropped
        metadata["rows_dropped_by_watermark"] = dg.MetadataValue.int(self.rows_dropped_by_watermark)
        self._context.log_event(
            dg.AssetObservation(asset_key=table_key(self._flow), metadata=metadata)
        )

    def _dropped_since_last_report(self, query: StreamingQuery, batch: int) -> int:
        new = [p for p in query.recentProgress if p["batchId"] > self._reported_batch]
        self._reported_batch = max(self._reported_batch, batch)
        return sum(rows_dropped_by_watermark(p) for p in new)

    def _lag(self, progress: dict[str, Any]) -> int | None:
        """Kafka ends minus the end of the newest batch; None if Kafka did not answer in time."""
        sources = progress.get("sources") or []
        if not sources or not sources[0].get("endOffset"):
            return None
        topic = self._flow.topic
        done = {
            p: o for (t, p), o in from_json_offsets(sources[0]["endOffset"]).items() if t == topic
        }
        try:
            ends = kafka_ends(self._kafka_conf, topic)
        except KafkaSourceError as exc:
            self._context.log.warning(f"lag unknown: {exc}")
            return None
        return stream_lag(ends, done).total
