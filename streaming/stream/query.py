"""One flow's always-on query: Kafka -> protobuf decode -> Delta table (+ quarantine)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from tidelake.streaming.delta.commit import current_constraints
from tidelake.streaming.delta.evolution import evolve_table
from tidelake.streaming.delta.write import MicroBatchWriter, ensure_flow_tables
from tidelake.streaming.errors import StartQueryAgainError, TidelakeError
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.kafka.acls import READS
from tidelake.streaming.kafka.admin import ensure_topic, require_access, require_topic
from tidelake.streaming.kafka.offsets import KafkaSourceError
from tidelake.streaming.kafka.read import (
    explain_query_failure,
    stream_records,
)
from tidelake.streaming.polling import poll_until
from tidelake.streaming.records.decode import decode_records
from tidelake.streaming.records.dedup import (
    EARLIER_DEDUP_OPERATOR,
    drop_repeats_in_stream,
    remembered_by_earlier_operator,
)
from tidelake.streaming.schemas.writer_schemas import WriterSchemas
from tidelake.streaming.settings import EngineSettings, redact
from tidelake.streaming.stream.checkpoint_upgrade import (
    lacks_state,
    pinned_start,
    recover_upgrade,
    remembered_keys,
    start_new_checkpoint,
    state_operator,
)
from tidelake.streaming.stream.guard import (
    check_checkpoint_matches_table,
    check_checkpoint_readable,
    check_table_files_exist,
)
from tidelake.streaming.stream.progress_log import ProgressLog
from tidelake.streaming.stream.status import committed_batch, kafka_ends, stream_lag

log = logging.getLogger(__name__)


def stream_name(flow: FlowSpec) -> str:
    """The name of a flow's always-on stream: its Spark query's, its progress log file's
    (progress_log.progress_file) and its Dagster job's."""
    return f"{flow.name}_stream"


_PROBE_TIMEOUT_S = 10.0


@dataclass
class FlowStream:
    """Builds and runs the streaming query of one declared flow: Spark's Kafka source, the JVM
    decoder and rules (decode), deduplication on Spark's state store (dedup), then foreachBatch
    into Delta (delta/write.py)."""

    flow: FlowSpec
    settings: EngineSettings
    kafka_conf: Mapping[str, str]
    schemas: WriterSchemas = field(init=False)
    _writer: MicroBatchWriter | None = field(default=None, init=False)
    _times: OrderedDict[int, dict[str, float]] = field(default_factory=OrderedDict, init=False)
    _first_batch_done: bool = field(default=False, init=False)
    _progress_log: ProgressLog | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.schemas = WriterSchemas.from_env(self.flow)

    @property
    def query_name(self) -> str:
        return stream_name(self.flow)

    @property
    def table_uri(self) -> str:
        return self.settings.table_uri(self.flow.table)

    @property
    def quarantine_uri(self) -> str:
        return self.settings.table_uri(self.flow.quarantine_table)

    @property
    def checkpoint(self) -> str:
        return self.settings.checkpoint_uri(self.flow.name)

    def preflight(self, *, restart_from_table: bool = False) -> None:
        """Fail fast, before Spark starts: a lake or checkpoint folder that cannot be written, a
        missing broker or topic (created instead with TIDELAKE_CREATE_TOPICS), a checkpoint that
        does not match the table, a table whose data files are gone (stream/guard.py), a message
        change the table cannot follow; then bring the table to the flow's message
        (delta/evolution.py).

        restart_from_table retires the checkpoint and starts a new one where the table's last
        batch ended: the documented way forward after a table was restored from a copy.
        """
        self.settings.require_usable_storage()
        if self.settings.create_topics:
            ensure_topic(self.kafka_conf, self.flow.topic, self.flow.topic_partitions)
        require_topic(self.kafka_conf, self.flow.topic)
        require_access(self.kafka_conf, self.flow.topic, READS)
        recover_upgrade(self.checkpoint)
        check_checkpoint_readable(self.flow.name, self.flow.topic, self.checkpoint)
        if restart_from_table:
            start_new_checkpoint(self.checkpoint, self.table_uri, reason="asked to restart")
        elif self.flow.dedup_key is not None and lacks_state(self.checkpoint):
            start_new_checkpoint(
                self.checkpoint,
                self.table_uri,
                self.quarantine_uri,
                reason="it was written without deduplication state",
            )
        elif self.flow.dedup_key is not None and (
            state_operator(self.checkpoint) == EARLIER_DEDUP_OPERATOR
        ):
            # the keys it remembers must be those of what the tables hold
            check_checkpoint_matches_table(
                self.flow.name, self.flow.topic, self.checkpoint, self.table_uri
            )
            start_new_checkpoint(
                self.checkpoint,
                self.table_uri,
                self.quarantine_uri,
                reason="its deduplication state is the earlier operator's",
                keep_keys=True,
            )
        check_table_files_exist(self.flow.name, self.table_uri)
        check_checkpoint_matches_table(
            self.flow.name, self.flow.topic, self.checkpoint, self.table_uri
        )
        evolve_table(self.flow, self.table_uri)
        self.schemas.prefetch()

    def explain_failure(self, message: str) -> str:
        return explain_query_failure(message, self.kafka_conf)

    def batch_error(self) -> TidelakeError | None:
        """Why the query's last batch was abandoned, if tidelake raised it (delta/write.py)."""
        return None if self._writer is None else self._writer.failure

    def start(
        self,
        spark: SparkSession,
        *,
        available_now: bool = False,
        stop: threading.Event | None = None,
    ) -> StreamingQuery:
        """Start the query (call preflight first: it prepares the checkpoint).

        The first start of this FlowStream runs one small micro-batch first
        (settings.first_batch_offsets records at most) as a query of its own, stopped once
        that batch committed and before another began: Spark's Kafka source has no setting
        for its first batch, and a cold JVM pays ~3x per record. A failure of that query is
        returned as the query, for the caller to report like any other; so is that query,
        stopped, when `stop` was set while it ran (nothing more is started).
        """
        if not self._first_batch_done:
            self._first_batch_done = True
            if (
                self.settings.first_batch_offsets < self.settings.max_offsets_per_trigger
                and self._records_waiting()
            ):
                # triggered once a day: the caller stops it after its first batch
                first = self._start(
                    spark, self.settings.first_batch_offsets, {"processingTime": "1 day"}
                )
                with contextlib.suppress(StreamingQueryException):  # returned, not raised
                    while first.isActive and first.lastProgress is None:
                        first.awaitTermination(0.1)  # type: ignore[arg-type]  # seconds
                if not first.isActive:
                    return first
                first.stop()
                if stop is not None and stop.is_set():
                    return first
        trigger: dict[str, Any] = (
            {"availableNow": True}
            if available_now
            else {"processingTime": self.settings.trigger_interval}
        )
        return self._start(spark, self.settings.max_offsets_per_trigger, trigger)

    def _records_waiting(self) -> bool:
        """Whether Kafka holds records past the checkpoint: the first-batch query triggers once
        a day, so on a topic with nothing to read it would wait that long for its batch."""
        try:
            ends = kafka_ends(dict(self.kafka_conf), self.flow.topic, _PROBE_TIMEOUT_S)
        except KafkaSourceError as exc:
            log.warning("%s: no small first batch (Kafka's ends unknown: %s)", self.query_name, exc)
            return False
        done = committed_batch(self.checkpoint, self.flow.topic)
        return stream_lag(ends, done.offsets if done else {}).total > 0

    def _start(
        self, spark: SparkSession, max_offsets: int, trigger: dict[str, Any]
    ) -> StreamingQuery:
        """The query with at most max_offsets records a batch, triggered as `trigger` says
        (DataStreamWriter.trigger's keyword arguments)."""
        log.info(
            "starting %s: topic %s -> %s (kafka %s), trigger %s",
            self.query_name,
            self.flow.topic,
            self.table_uri,
            redact(self.kafka_conf),
            trigger,
        )
        records = stream_records(
            spark,
            self.flow,
            self.kafka_conf,
            starting_offsets=pinned_start(self.checkpoint) or "earliest",
            max_offsets_per_trigger=max_offsets,
            fail_on_data_loss=self.settings.fail_on_data_loss,
        )
        constraints = current_constraints(self.table_uri)
        decoded = decode_records(records, self.flow, self.kafka_conf, self.schemas, constraints)
        ensure_flow_tables(decoded, self.flow, self.table_uri, self.quarantine_uri)
        self._writer = MicroBatchWriter(
            self.flow,
            self.table_uri,
            self.quarantine_uri,
            self.checkpoint,
            self.schemas,
            self._times,
            constraints,
        )
        seeds = remembered_keys(self.checkpoint)
        remembered = (
            None if seeds is None else remembered_by_earlier_operator(spark, seeds, self.flow)
        )
        writer = (
            drop_repeats_in_stream(decoded, self.flow, remembered)
            .writeStream.foreachBatch(self._writer)
            .queryName(self.query_name)
            .option("checkpointLocation", self.checkpoint)
        )
        query = writer.trigger(**trigger).start()
        if self.settings.progress_log is not None:
            self._progress_log = self._progress_log or ProgressLog(
                self.settings.progress_log, self.query_name, self.batch_times
            )
            self._progress_log.follow(query)
        return query

    def batch_times(self, batch_id: int) -> Mapping[str, float] | None:
        """The writer's own timings of a recent batch (progress_log.BatchTimes)."""
        return self._times.get(batch_id)


ProgressHandler = Callable[[StreamingQuery, dict[str, Any] | None], None]
"""Called every progress interval with the query and its newest progress (None before any)."""


def log_progress(query: StreamingQuery, progress: dict[str, Any] | None) -> None:
    if progress is None:
        log.info("%s: waiting for the first batch", query.name)
        return
    log.info(
        "%s batch %s: %s rows, %.0f rows/s in, %.0f rows/s processed",
        query.name,
        progress["batchId"],
        progress["numInputRows"],
        progress.get("inputRowsPerSecond") or 0.0,
        progress.get("processedRowsPerSecond") or 0.0,
    )


class StreamFailedError(TidelakeError, RuntimeError):
    """The streaming query stopped with an error; the message says why in tidelake's terms."""


BATCH_GRACE_S = 60.0
"""How long a stop waits for the micro-batch in flight to commit before it abandons it."""


def finish_current_batch(query: StreamingQuery, grace_s: float = BATCH_GRACE_S) -> None:
    """Wait until no micro-batch is in flight (at most grace_s), so that a stop ends after a
    commit rather than abandoning work; an abandoned batch is replayed by the next run anyway."""

    def last_batch() -> int:
        progress = query.lastProgress
        return int(progress["batchId"]) if progress else -1

    done = last_batch()

    def settled() -> bool | None:
        in_flight = query.isActive and query.status["isTriggerActive"] and last_batch() == done
        return None if in_flight else True

    with contextlib.suppress(TimeoutError):
        poll_until(settled, timeout_s=grace_s, interval_s=0.05, timeout_error=TimeoutError)


def run_query(
    start: Callable[[], StreamingQuery],
    stop: threading.Event,
    progress_interval_s: float = 10.0,
    on_progress: ProgressHandler = log_progress,
    explain: Callable[[str], str] = str,
    batch_error: Callable[[], TidelakeError | None] = lambda: None,
) -> None:
    """Start the query and await it (await_query). When a batch failed with one of tidelake's
    errors (batch_error), raise that one line instead of Spark's wrapping; start the query again,
    in the same session, when that error asks for it (StartQueryAgainError: new writer schemas
    learned, the table's CHECK constraints changed)."""
    while True:
        query = start()
        try:
            await_query(query, stop, progress_interval_s, on_progress, explain)
            return
        except StreamFailedError:
            error = batch_error()
            if error is None:
                raise
            if stop.is_set() or not isinstance(error, StartQueryAgainError):
                raise error from None
            log.info("%s: starting again: %s", query.name, error)


def await_query(
    query: StreamingQuery,
    stop: threading.Event,
    progress_interval_s: float = 10.0,
    on_progress: ProgressHandler = log_progress,
    explain: Callable[[str], str] = str,
) -> None:
    """Block until the query ends or `stop` is set (then stop it gracefully).

    Reports progress every `progress_interval_s`, also while idle, so that a watcher can tell a
    quiet stream from a dead one. Raises StreamFailedError if the query failed, with the
    failure put in words by `explain` (FlowStream.explain_failure).
    """
    next_report = time.monotonic() + progress_interval_s
    try:
        while query.isActive and not stop.is_set():
            query.awaitTermination(0.25)  # type: ignore[arg-type]  # seconds; pyspark's hint says int
            if time.monotonic() >= next_report and query.isActive:
                next_report = time.monotonic() + progress_interval_s
                on_progress(query, query.lastProgress)
        if query.isActive:
            finish_current_batch(query)
            log.info("stopping %s", query.name)
            query.stop()
        failure = query.exception()
    except StreamingQueryException as exc:
        failure = exc
    if failure is not None:
        raise StreamFailedError(f"{query.name} failed: {explain(str(failure))}") from failure
