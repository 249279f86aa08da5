"""The driver JVM tidelake starts (streaming/spark/session.py): its heap taken whole at start and
jemalloc as its allocator, read from the running JVM of the suite's session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tidelake.streaming.spark.session import installed_jemalloc


def test_the_heap_is_fixed_and_the_allocator_is_jemalloc(spark: Any) -> None:
    jvm = spark._jvm
    arguments = list(
        jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
    )
    assert "-Xms1g" in arguments and "-XX:+AlwaysPreTouch" in arguments, arguments
    if installed_jemalloc() is None:
        pytest.skip("libjemalloc2 is not installed: make venv installs it where it can")
    pid = jvm.java.lang.ProcessHandle.current().pid()
    assert "libjemalloc.so" in Path(f"/proc/{pid}/maps").read_text()


DRIVER = """
import sys
from tidelake.streaming.spark.session import build_spark_session

spark = build_spark_session("local[1]", app_name="killed-driver")
print(spark._jvm.java.lang.ProcessHandle.current().pid(), flush=True)
spark.range(10**13).selectExpr("sum(id % 7)").collect()  # busy, as a batch's MERGE
"""


def test_a_killed_drivers_jvm_is_gone_with_it(tmp_path: Path) -> None:
    """SIGKILL of the Python driver (as of a run's process group, which misses the JVM: it has
    a session of its own) takes its JVM with it, from the kernel, even while the JVM gets no
    CPU: stopped here (SIGSTOP) as on a machine loaded enough that it noticed its closed stdin
    only seconds later and went on with its batch's MERGE. A restarted run never overlaps it."""
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "driver.log").open("wb"),
        start_new_session=True,
        text=True,
    )
    assert driver.stdout is not None
    jvm = psutil.Process(int(driver.stdout.readline()))
    time.sleep(2)  # its job running
    assert _alive(jvm)
    jvm.suspend()  # no CPU for it: it cannot notice its closed stdin
    try:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        killed = time.monotonic()
        while _alive(jvm) and time.monotonic() - killed < 10:
            time.sleep(0.02)
        print(f"the JVM was gone {time.monotonic() - killed:.2f}s after its driver")
        assert not _alive(jvm), "the JVM outlived its killed driver"
    finally:
        if _alive(jvm):
            jvm.kill()


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False
