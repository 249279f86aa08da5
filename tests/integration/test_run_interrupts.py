"""A Dagster run interrupted while its step uses Spark ends as interrupted, at once and quietly.

Dagster interrupts a step by sending SIGINT to its own process (Ctrl-C in `tidelake dev`,
Terminate in the UI). Each case runs a real Dagster materialization with a real Spark session in
a fresh process and interrupts it there, as Dagster's executor does.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

RUN = """
import os, signal, sys, threading, time
import dagster as dg
from dagster_pyspark import LazyPySparkResource
from tidelake.streaming.spark.session import host_session, spark_session_conf

WHERE = sys.argv[1]

def interrupt_while_session_is_made() -> None:
    # once PySpark would have put its own handler in (or soon after the context exists)
    from pyspark import SparkContext
    while SparkContext._active_spark_context is None:
        time.sleep(0.001)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if "SparkContext" in getattr(signal.getsignal(signal.SIGINT), "__qualname__", ""):
            break
        time.sleep(0.001)
    os.kill(os.getpid(), signal.SIGINT)

@dg.asset
def spark_work(spark: LazyPySparkResource) -> None:
    if WHERE == "start":  # while the session is still being made
        threading.Thread(target=interrupt_while_session_is_made, daemon=True).start()
    with host_session(lambda: spark.spark_session, "local[1]") as session:
        from pyspark.sql import SparkSession
        print("ACTIVE", SparkSession.getActiveSession() is session, flush=True)
        tracker = session.sparkContext.statusTracker()
        def interrupt_when_running() -> None:
            while WHERE == "job" and not tracker.getActiveJobsIds():
                time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGINT)
        if WHERE != "start":
            threading.Thread(target=interrupt_when_running, daemon=True).start()
        if WHERE == "job":  # never ends by itself: only a cancelled job lets the run end
            session.range(0, 10**18, numPartitions=1).selectExpr("sum(sqrt(id))").collect()
        else:
            time.sleep(600)

spark = LazyPySparkResource(spark_config=spark_session_conf("local[1]", {}, "interrupt-test"))
result = dg.materialize([spark_work], resources={"spark": spark}, raise_on_error=False)
failure = result.get_step_failure_events()[0].step_failure_data.error
print("RUN SUCCESS", result.success)
print("STEP ERROR", failure.cls_name, "CAUSE", failure.cause, "CONTEXT", failure.context)
"""


@pytest.mark.parametrize("where", ["job", "python", "start"])
def test_an_interrupted_step_ends_interrupted_without_tracebacks(where: str) -> None:
    """During a Spark action (the job is cancelled), between JVM calls (at once), and while the
    session is being made (PySpark's own handler would call the JVM from inside the signal)."""
    done = subprocess.run(
        [sys.executable, "-c", RUN, where], capture_output=True, text=True, timeout=240
    )
    said = done.stdout + done.stderr
    print(said[-1500:])
    assert done.returncode == 0, said
    assert "RUN SUCCESS False" in said, said
    if where != "start":  # made on another thread, the session is still this one's active one
        assert "ACTIVE True" in said, said
    assert "STEP ERROR DagsterExecutionInterruptedError CAUSE None CONTEXT None" in said, said
    for noise in ("Traceback", "reentrant call", "KeyboardInterrupt", "Py4JJavaError"):
        assert noise not in said, said
