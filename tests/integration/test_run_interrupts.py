"""A Dagster run interrupted while its step uses Spark ends as interrupted, at once and quietly.

Dagster interrupts a step by sending SIGINT to its own process (Ctrl-C in `tidelake dev`,
Terminate in the UI). Each case runs a real Dagster materialization with a real Spark session in
a process of the test's and interrupts it there, as Dagster's executor does: the interrupt during
a job and the one between JVM calls share a process (one after the other), the one while the
session is made needs a fresh one.
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

WHERE = ""

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
    with host_session(spark) as session:
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

for WHERE in sys.argv[1:]:  # one run after another in this process and its one Spark
    spark = LazyPySparkResource(spark_config=spark_session_conf("local[1]", {}, "interrupt-test"))
    result = dg.materialize([spark_work], resources={"spark": spark}, raise_on_error=False)
    failure = result.get_step_failure_events()[0].step_failure_data.error
    print(WHERE, "RUN SUCCESS", result.success)
    print(WHERE, "STEP ERROR", failure.cls_name, "CAUSE", failure.cause, "CONTEXT", failure.context)
"""


@pytest.mark.parametrize("cases", [["job", "python"], ["start"]], ids=["job-python", "start"])
def test_an_interrupted_step_ends_interrupted_without_tracebacks(cases: list[str]) -> None:
    """During a Spark action (the job is cancelled), between JVM calls (at once; the same
    process's next run, so its session outlives an interrupt), and while the session is being
    made (PySpark's own handler would call the JVM from inside the signal: a fresh process)."""
    done = subprocess.run(
        [sys.executable, "-c", RUN, *cases], capture_output=True, text=True, timeout=240
    )
    said = done.stdout + done.stderr
    print(said[-1500:])
    assert done.returncode == 0, said
    for where in cases:
        assert f"{where} RUN SUCCESS False" in said, said
        error = "STEP ERROR DagsterExecutionInterruptedError CAUSE None CONTEXT None"
        assert f"{where} {error}" in said, said
    if cases != ["start"]:  # made on another thread, the session is still this one's active one
        assert said.count("ACTIVE True") == len(cases), said
    for noise in ("Traceback", "reentrant call", "KeyboardInterrupt", "Py4JJavaError"):
        assert noise not in said, said
