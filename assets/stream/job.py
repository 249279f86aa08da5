"""A flow's always-on stream as a Dagster job (made by always_on), and its progress reports:
the run's log and observations of the table asset."""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dagster as dg
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from tidelake.assets.stream import health
from tidelake.assets.stream.always_on import AlwaysOn, build_always_on_job
from tidelake.assets.tables.keys import table_key, topic_key
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.offsets import KafkaSourceError, from_json_offsets
from tidelake.streaming.schemas.writer_schemas import WriterSchemas
from tidelake.streaming.settings import DELTA_CHECKPOINT_INTERVAL, EngineSettings
from tidelake.streaming.stream.progress_log import BatchTimes
from tidelake.streaming.stream.query import FlowStream, stream_name
from tidelake.streaming.stream.status import (
    folder_bytes,
    kafka_ends,
    log_since_checkpoint,
    state_size,
    stream_lag,
)


def flow_stream(flow: FlowSpec) -> AlwaysOn[FlowStream]:
    """The flow's stream as an always-on query."""

    def started(stream: FlowStream) -> str:
        return f"{flow.topic} -> {stream.table_uri} (checkpoint {stream.checkpoint})"

    return AlwaysOn[FlowStream](
        name=stream_name(flow),
        tag=flow.name,
        description=f"The always-on stream of flow {flow.name}; its supervisor sensor keeps "
        "exactly one run alive. Stop the sensor before terminating a run to keep it stopped.",
        op_name=f"run_{stream_name(flow)}",
        op_description=f"Streams Kafka topic {flow.topic!r} into Delta table {flow.table!r} "
        "until the run is terminated.",
        make_query=lambda settings, conf: FlowStream(flow, settings, conf),
        started=started,
        make_reporter=lambda context, stream, conf: ProgressReporter(
            context,
            flow,
            conf,
            stream.schemas,
            StreamPlaces(stream.table_uri, stream.checkpoint, stream.batch_times),
        ),
    )


def writer_schemas_metadata(schemas: WriterSchemas) -> dict[str, Any]:
    """The topic's writer schemas the stream has read, as the Dagster UI shows them: a table of
    schema id, the subject versions it is registered under, and whether records of it land or
    why they are quarantined."""
    lines = ["| schema id | registered as | records |", "|---|---|---|"]
    for schema_id in sorted(schemas.seen):
        verdict = schemas.verdicts.get(schema_id)
        if verdict is None:
            versions, fate = "-", "read as the flow's own .proto (no registry)"
        else:
            refusal = verdict.refusal
            versions = verdict.registered_as or "-"
            fate = "land" if refusal is None else f"quarantined: {refusal}"
        lines.append(f"| {schema_id} | {versions} | {fate} |")
    return {
        "writer_schema_ids": dg.MetadataValue.text(", ".join(map(str, sorted(schemas.seen)))),
        "writer_schemas": dg.MetadataValue.md("\n".join(lines)),
        "schema_registry": dg.MetadataValue.text(
            schemas.registry.url if schemas.registry else "none"
        ),
    }


def build_stream_job(flow: FlowSpec, settings: EngineSettings) -> dg.JobDefinition:
    """The job whose run is the flow's always-on stream."""
    return build_always_on_job(flow_stream(flow), settings)


MIN_BATCHES_TO_RETAIN = "spark.sql.streaming.minBatchesToRetain"


@dataclass(frozen=True)
class StreamPlaces:
    """Where a stream's age shows: its table, its checkpoint and its writer's own timings."""

    table_uri: str
    checkpoint: str
    batch_times: BatchTimes


class ProgressReporter:
    """Logs the query's progress at every report (the run's heartbeat: always_on's
    STALE_RUN_AFTER_S), records it as an observation of the table asset at most every
    HEALTH_HEARTBEAT_S (Dagster keeps every observation for good), and the writer schemas the
    stream has read as an observation of the topic asset when they change.

    The observation also carries what grows with the stream's age, each beside the bound the
    settings give it (docs/running.md, "A stream's age"): its deduplication state, its commit
    time, its table's log entries since the last checkpoint and its checkpoint folder's size.
    The last two are read from storage, so only when an observation is due."""

    def __init__(
        self,
        context: dg.OpExecutionContext,
        flow: FlowSpec,
        kafka_conf: dict[str, str],
        schemas: WriterSchemas,
        places: StreamPlaces | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._clock = clock
        self._context = context
        self._flow = flow
        self._kafka_conf = kafka_conf
        self._schemas = schemas
        self._places = places
        self._reported_schemas: dict[int, str] = {}
        self._observed_at: float | None = None
        self._batch_figures: dict[str, Any] = {}

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
        self._remember_batch(progress)
        now = self._clock()
        if self._observed_at is None or now - self._observed_at >= health.HEALTH_HEARTBEAT_S:
            self._observed_at = now
            self._context.log_event(
                dg.AssetObservation(
                    asset_key=table_key(self._flow),
                    description=self._age_bounds(),
                    metadata={**metadata, **self._age()},
                )
            )
        self._report_schemas()

    def _remember_batch(self, progress: dict[str, Any]) -> None:
        """Keep the figures of the last batch that ran: an idle stream's progress (Spark reports
        one every 10 s while no data comes, under the next batch's id) has no commit of its own,
        and the observation then shows the last batch's."""
        figures: dict[str, Any] = {}
        state = state_size(progress)
        if state is not None:
            if state.keys is not None:
                figures["state_keys"] = dg.MetadataValue.int(state.keys)
            figures["state_keys_written"] = dg.MetadataValue.int(state.keys_written)
            figures["state_keys_expired"] = dg.MetadataValue.int(state.keys_expired)
            figures["state_memory_bytes"] = dg.MetadataValue.int(state.memory_bytes)
            figures["state_disk_bytes"] = dg.MetadataValue.int(state.disk_bytes)
        if self._places is not None:
            times = self._places.batch_times(int(progress["batchId"])) or {}
            if "commit_ms" in times:
                figures["commit_ms"] = dg.MetadataValue.float(round(times["commit_ms"], 1))
        self._batch_figures.update(figures)

    def _age(self) -> dict[str, Any]:
        """The figures that grow with the stream's age, as numbers the UI plots."""
        figures = dict(self._batch_figures)
        if self._places is None:  # a reporter of Spark's progress alone
            return figures
        try:
            log = log_since_checkpoint(self._places.table_uri)
            checkpoint_bytes = folder_bytes(self._places.checkpoint)
        except OSError as exc:
            self._context.log.warning(f"the stream's table log or checkpoint unreadable: {exc}")
            return figures
        if log is not None:
            figures["log_entries_since_checkpoint"] = dg.MetadataValue.int(log.entries)
        figures["log_entries_since_checkpoint_bound"] = dg.MetadataValue.int(
            DELTA_CHECKPOINT_INTERVAL
        )
        figures["checkpoint_bytes"] = dg.MetadataValue.int(checkpoint_bytes)
        retained = SparkSession.active().conf.get(MIN_BATCHES_TO_RETAIN)  # the query's own
        if retained is not None:
            figures["checkpoint_batches_retained"] = dg.MetadataValue.int(int(retained))
        return figures

    def _age_bounds(self) -> str:
        """The bounds of the age figures, in words (docs/running.md, "A stream's age")."""
        return (
            "Bounds: state keys at most the keys arriving within the deduplication's key "
            f"lifetime (2 x the allowed lateness {self._flow.allowed_lateness} plus half of it, "
            "at least 10 minutes), the state's bytes their size; log entries since the table's "
            f"checkpoint at most delta.checkpointInterval ({DELTA_CHECKPOINT_INTERVAL}); the "
            f"checkpoint folder the last {MIN_BATCHES_TO_RETAIN} batches' offsets, commits and "
            "state versions; the commit time independent of the log's length (every "
            "delta.checkpointInterval versions it writes a checkpoint, which follows the "
            "table's live files)."
        )

    def _report_schemas(self) -> None:
        """An observation of the topic each time the stream has met a new writer schema."""
        seen = dict(self._schemas.seen)
        if seen == self._reported_schemas:
            return
        self._reported_schemas = seen
        self._context.log_event(
            dg.AssetObservation(
                asset_key=topic_key(self._flow),
                metadata=writer_schemas_metadata(self._schemas),
            )
        )

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
