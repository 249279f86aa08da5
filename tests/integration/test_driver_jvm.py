"""The driver JVM tidelake starts (streaming/spark/session.py): its heap taken whole at start and
jemalloc as its allocator, read from the running JVM of the suite's session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
