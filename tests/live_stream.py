"""Helpers for tests that race work against a live stream in the shared SparkSession."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from lake_readers import read_delta

from tidelake.platform.dev.dagster_web import wait_for
from tidelake.platform.dev.produce import ProduceReport, produce_demo_events
from tidelake.streaming.stream.query import FlowStream, await_query, run_query


def cli_available_now(
    env: dict[str, str], cwd: Any = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """`tidelake stream call_events --available-now` as its own process, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "tidelake.platform.cli", "stream", "call_events", "--available-now"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def run_available_now(spark: Any, flow: Any, settings: Any, kafka_conf: Any) -> FlowStream:
    """Run the flow's stream until it has committed everything on the topic, then return."""
    stream = FlowStream(flow, settings, kafka_conf)
    stream.preflight()
    run_query(
        lambda: stream.start(spark, available_now=True),
        threading.Event(),
        explain=stream.explain_failure,
        batch_error=stream.batch_error,
    )
    return stream


@dataclass(frozen=True)
class StreamedRun:
    """What produce_and_stream did: the producer's report, the stream, and the flow's table and
    quarantine as delta-rs read them once the stream had read everything."""

    report: ProduceReport
    stream: FlowStream
    table: pa.Table
    quarantine: pa.Table


def produce_and_stream(
    spark: Any,
    flow: Any,
    settings: Any,
    kafka_conf: Any,
    stream_conf: Any = None,
    **produce_options: Any,
) -> StreamedRun:
    """Produce demo events to the flow's topic (produce_demo_events with produce_options, no
    progress bar) with kafka_conf, run the stream (with stream_conf, default the same) until it
    has read everything, and read both tables back."""
    report = produce_demo_events(flow, kafka_conf, **{"progress": False, **produce_options})
    stream = run_available_now(spark, flow, settings, stream_conf or kafka_conf)
    return StreamedRun(
        report, stream, read_delta(stream.table_uri), read_delta(stream.quarantine_uri)
    )


@contextmanager
def running_stream(spark: Any, flow: Any, settings: Any, kafka_conf: Any) -> Iterator[FlowStream]:
    """The flow's always-on query, started and past its first progress; stopped on exit."""
    stream = FlowStream(flow, settings, kafka_conf)
    query = stream.start(spark)
    stop = threading.Event()
    runner = threading.Thread(target=await_query, args=(query, stop), daemon=True)
    runner.start()
    try:
        # 60 s timed out on 2 cores at a load average of 30
        wait_for(lambda: query.lastProgress or None, 300, "the stream's first batch", 0.2)
        yield stream
    finally:
        stop.set()
        runner.join(timeout=60)


class RestartingStream(threading.Thread):
    """The flow's stream as `tidelake stream` runs it (run_query: started again in the same
    session when a batch asks for it), in a thread of its own; `failures` holds the one line it
    stopped on, if it did."""

    def __init__(self, spark: Any, flow: Any, settings: Any, kafka_conf: Any):
        super().__init__(daemon=True)
        self.spark = spark
        self.stream = FlowStream(flow, settings, kafka_conf)
        self.stream.preflight()
        self.stop = threading.Event()
        self.failures: list[BaseException] = []

    def run(self) -> None:
        jvm = self.spark._jvm  # the JVM keeps the active session per thread
        jvm.SparkSession.setActiveSession(self.spark._jsparkSession)
        try:
            run_query(
                lambda: self.stream.start(self.spark),
                self.stop,
                explain=self.stream.explain_failure,
                batch_error=self.stream.batch_error,
            )
        except Exception as exc:
            self.failures.append(exc)

    def __enter__(self) -> RestartingStream:
        self.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop.set()
        self.join(timeout=60)


class BackgroundProducer(threading.Thread):
    """produce_demo_events in a thread; join() returns its report."""

    def __init__(self, flow: Any, kafka_conf: Any, **kwargs: Any):
        super().__init__(daemon=True)
        self._args = (flow, kafka_conf)
        self._kwargs = {"progress": False, "collect_keys": True, **kwargs}
        self.report: ProduceReport | None = None

    def run(self) -> None:
        self.report = produce_demo_events(*self._args, **self._kwargs)

    def join(self, timeout: float | None = None) -> ProduceReport:  # type: ignore[override]
        super().join(timeout)
        assert self.report is not None, "the producer failed"
        return self.report


def wait_for_rows(uri: str, rows: int, timeout_s: float = 90) -> int:
    """Rows in the table once it holds at least `rows`, or whatever it holds at the timeout."""

    def enough() -> int | None:
        count = read_delta(uri).num_rows
        return count if count >= rows else None

    try:
        return wait_for(enough, timeout_s, f"{rows} rows in {uri}", 0.5)
    except TimeoutError:
        return read_delta(uri).num_rows
