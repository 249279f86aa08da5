"""A flow's streams as queries of one Spark application (issue 77): the flow's query and its
streaming use cases' in one session, each in a FAIR scheduler pool of its own so one query's
large batch does not hold the others' jobs, each restarted alone, with back-off, when it fails.

A query here is what the always-on job runs (FlowStream, UseCaseStream): built independently of
where it runs, started with `start(spark)`. Its thread sets its pool before it starts the query;
Spark's query thread inherits it (SparkContext's local properties are inheritable), and so do
the jobs its foreachBatch runs. The thread also makes the session its active one, which the
JVM keeps per thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from tidelake.streaming.errors import TidelakeError
from tidelake.streaming.stream.backoff import Backoff
from tidelake.streaming.stream.query import ProgressHandler, log_progress, run_query

log = logging.getLogger(__name__)

FAIR_SCHEDULING = {"spark.scheduler.mode": "FAIR"}
"""The Spark setting an application hosting several queries is started with."""
POOL_PROPERTY = "spark.scheduler.pool"


class HostedQuery(Protocol):
    """What the application needs of a query (FlowStream and UseCaseStream have it)."""

    @property
    def query_name(self) -> str: ...

    def start(self, spark: SparkSession) -> StreamingQuery: ...

    def explain_failure(self, message: str) -> str: ...

    def batch_error(self) -> TidelakeError | None: ...


QueryFailed = Callable[[str, BaseException, float], None]
"""(query name, its error, seconds until its next start) -> None."""


def _log_failure(name: str, error: BaseException, retry_in_s: float) -> None:
    log.error("%s failed, starting it again in %.0f s: %s", name, retry_in_s, error)


@dataclass
class QueryRuns:
    """One hosted query's starts and failures, as its thread records them."""

    starts: int = 0
    failures: int = 0


def run_application(
    spark: SparkSession,
    queries: Sequence[HostedQuery],
    stop: threading.Event,
    *,
    progress_interval_s: float = 10.0,
    reporters: Mapping[str, ProgressHandler] | None = None,
    backoff: Backoff | None = None,
    on_failure: QueryFailed = _log_failure,
) -> dict[str, QueryRuns]:
    """Run every query in `spark` until `stop` is set, each in a thread and a scheduler pool of
    its own (named after the query), each started again after `backoff` when it fails while the
    others go on. `reporters` maps a query's name to its progress handler. Returns each query's
    runs once all stopped gracefully."""
    names = [q.query_name for q in queries]
    if len(set(names)) != len(names):
        raise ValueError(f"queries must have distinct names: {names}")
    if spark.conf.get("spark.scheduler.mode", "FIFO") != "FAIR":
        log.warning("%s: the session's scheduler is not FAIR; pools are ignored", names)
    runs = {name: QueryRuns() for name in names}
    threads = [
        threading.Thread(
            target=_supervise,
            args=(spark, query, stop, runs[query.query_name]),
            kwargs={
                "progress_interval_s": progress_interval_s,
                "reporter": (reporters or {}).get(query.query_name, log_progress),
                "backoff": backoff or Backoff(),
                "on_failure": on_failure,
            },
            name=f"tidelake-query-{query.query_name}",
            daemon=True,
        )
        for query in queries
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return runs


def _supervise(
    spark: SparkSession,
    query: HostedQuery,
    stop: threading.Event,
    runs: QueryRuns,
    *,
    progress_interval_s: float,
    reporter: ProgressHandler,
    backoff: Backoff,
    on_failure: QueryFailed,
) -> None:
    """One query's thread: start it in its pool, await it, start it again after a failure."""
    # the active session is per thread in the JVM (the flow's decoder looks it up there)
    spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)  # type: ignore[union-attr]
    spark.sparkContext.setLocalProperty(POOL_PROPERTY, query.query_name)
    failures_in_a_row = 0
    while not stop.is_set():
        runs.starts += 1
        started = time.monotonic()
        try:
            run_query(
                lambda: query.start(spark),
                stop,
                progress_interval_s,
                reporter,
                query.explain_failure,
                query.batch_error,
            )
            return
        except Exception as exc:  # any failure of one query: reported, started again
            if time.monotonic() - started >= backoff.healthy_after_s:
                failures_in_a_row = 0
            failures_in_a_row += 1
            runs.failures += 1
            delay = backoff.delay(failures_in_a_row)
            on_failure(query.query_name, exc, delay)
            if stop.wait(delay):
                return
