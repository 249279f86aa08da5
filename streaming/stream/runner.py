"""Run one flow's stream, or one use case's, or a flow's streams in one Spark application, as a
process: until stopped, or until caught up (a flow's --available-now).

SIGTERM and SIGINT stop the query gracefully: the batch in flight commits first (up to
query.BATCH_GRACE_S), then the query stops. A batch abandoned all the same (a second
signal, or a stop past the grace) has its offsets in the checkpoint but not its commit log, so
the restarted query replays exactly that batch and the idempotent Delta sink drops what was
already committed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.stream.application import FAIR_SCHEDULING, HostedQuery, run_application
from tidelake.streaming.stream.query import FlowStream, run_query
from tidelake.streaming.usecase.daily import BuiltDay, DaySource
from tidelake.streaming.usecase.refresh import refresh_daily
from tidelake.streaming.usecase.spec import UseCaseSpec
from tidelake.streaming.usecase.stream import UseCaseStream

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def run_flow_stream(
    flow: FlowSpec,
    settings: EngineSettings,
    kafka_conf: Mapping[str, str],
    *,
    available_now: bool = False,
    restart_from_table: bool = False,
    stop: threading.Event | None = None,
) -> None:
    """Start Spark and the flow's query, block until it ends; raise if it fails."""
    stream = FlowStream(flow, settings, kafka_conf)
    # broker, topic, checkpoint and table problems surface before Spark's start-up cost
    stream.preflight(restart_from_table=restart_from_table)
    stop = stop or threading.Event()
    with _spark_session(settings, f"tidelake-{flow.name}") as spark:
        run_query(
            lambda: stream.start(spark, available_now=available_now, stop=stop),
            stop,
            explain=stream.explain_failure,
            batch_error=stream.batch_error,
        )


def run_flow_application(
    flow: FlowSpec,
    use_cases: Sequence[UseCaseSpec],
    settings: EngineSettings,
    kafka_conf: Mapping[str, str],
    *,
    stop: threading.Event | None = None,
) -> None:
    """Start one Spark application and run the flow's query and the streaming `use_cases` on
    its table as its queries (application.py), each restarted alone when it fails, until
    stopped."""
    stream = FlowStream(flow, settings, kafka_conf)
    stream.preflight()
    hosted: list[HostedQuery] = [stream, *(UseCaseStream(u, flow, settings) for u in use_cases)]
    stop = stop or threading.Event()
    with _spark_session(settings, f"tidelake-{flow.name}", FAIR_SCHEDULING) as spark:
        run_application(spark, hosted, stop)


def run_use_case_stream(
    use_case: UseCaseSpec,
    flow: FlowSpec,
    settings: EngineSettings,
    *,
    stop: threading.Event | None = None,
) -> None:
    """Start Spark and the use case's query (its input is `flow`'s table), block until it
    ends; raise if it fails."""
    stream = UseCaseStream(use_case, flow, settings)
    stream.preflight()
    stop = stop or threading.Event()
    with _spark_session(settings, f"tidelake-{stream.query_name}") as spark:
        run_query(
            lambda: stream.start(spark),
            stop,
            explain=stream.explain_failure,
            batch_error=stream.batch_error,
        )


def run_daily_refresh(
    use_case: UseCaseSpec, source: DaySource, settings: EngineSettings
) -> list[BuiltDay]:
    """Start Spark and rebuild a Daily use case's table, every day of its input (refresh.py)."""
    with _spark_session(settings, f"tidelake-refresh-{use_case.name}") as spark:
        return list(refresh_daily(spark, use_case, source, settings))


@contextmanager
def _spark_session(
    settings: EngineSettings, app_name: str, conf: Mapping[str, str] | None = None
) -> Iterator[SparkSession]:
    from tidelake.streaming.spark.session import build_spark_session

    started = time.monotonic()
    spark = build_spark_session(
        settings.spark_master, {**settings.spark_conf, **(conf or {})}, app_name
    )
    log.info("spark session ready in %.1fs", time.monotonic() - started)
    try:
        yield spark
    finally:
        # the state store's RocksDB closes while the JVM runs: left to the JVM's exit, a
        # compaction thread calling back into the JVM deadlocked its halt (the process ended,
        # its JVM stayed)
        spark.stop()
