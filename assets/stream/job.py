"""A flow's always-on stream as a Dagster job (made by always_on), and its progress reports:
the run's log and observations of the table asset."""

import time
from collections.abc import Callable
from typing import Any

import dagster as dg
from pyspark.sql.streaming import StreamingQuery

from tidelake.assets.stream import health
from tidelake.assets.stream.always_on import AlwaysOn, build_always_on_job
from tidelake.assets.tables.keys import table_key, topic_key
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.offsets import KafkaSourceError, from_json_offsets
from tidelake.streaming.schemas.writer_schemas import WriterSchemas
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.stream.query import FlowStream, stream_name
from tidelake.streaming.stream.status import kafka_ends, stream_lag


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
            context, flow, conf, stream.schemas
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


class ProgressReporter:
    """Logs the query's progress at every report (the run's heartbeat: always_on's
    STALE_RUN_AFTER_S), records it as an observation of the table asset at most every
    HEALTH_HEARTBEAT_S (Dagster keeps every observation for good), and the writer schemas the
    stream has read as an observation of the topic asset when they change."""

    def __init__(
        self,
        context: dg.OpExecutionContext,
        flow: FlowSpec,
        kafka_conf: dict[str, str],
        schemas: WriterSchemas,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._clock = clock
        self._context = context
        self._flow = flow
        self._kafka_conf = kafka_conf
        self._schemas = schemas
        self._reported_schemas: dict[int, str] = {}
        self._observed_at: float | None = None

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
        now = self._clock()
        if self._observed_at is None or now - self._observed_at >= health.HEALTH_HEARTBEAT_S:
            self._observed_at = now
            self._context.log_event(
                dg.AssetObservation(asset_key=table_key(self._flow), metadata=metadata)
            )
        self._report_schemas()

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
