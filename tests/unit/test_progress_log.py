"""The progress log's follower ends quietly when the stream's JVM dies under it (the soak's
fault: the JVM SIGKILLed): the supervisor reports that, and the follower must not add a
traceback of its own by asking the dead JVM for the query's name."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from py4j.protocol import Py4JError

from tidelake.streaming.stream.progress_log import ProgressLog


class KilledJvmQuery:
    """A StreamingQuery as py4j answers once its JVM is gone: its name was read while the JVM
    lived; every call since raises Py4JError."""

    def __init__(self) -> None:
        self._names = iter(["call_events_stream"])

    @property
    def name(self) -> str:
        for name in self._names:
            return name
        raise Py4JError("An error occurred while calling o643.name")

    @property
    def isActive(self) -> bool:  # pyspark's name
        raise Py4JError("An error occurred while calling o643.isActive")


def test_the_follower_ends_quietly_when_the_jvm_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raised: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", raised.append)
    progress = ProgressLog(tmp_path, "call_events_stream", lambda _: None)
    thread = progress.follow(KilledJvmQuery())  # type: ignore[arg-type]
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert raised == []
    assert progress.path.read_text() == ""
