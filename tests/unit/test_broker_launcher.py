"""The local broker's launcher with a stand-in `java`: start-up failures and hangs are reported
and cleaned up; the state file names a live broker only."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from process_states import gone

from tidelake.platform.local.kafka_broker import BrokerError, LocalKafkaBroker
from tidelake.streaming.errors import ConfigError
from tidelake.streaming.kafka.broker_state import running_broker


def _fake_java(tmp_path: Path, body: str) -> str:
    """A `java` whose storage format succeeds and whose broker runs `body`."""
    script = tmp_path / "fake-java"
    script.write_text(
        "#!/bin/sh\n"
        'case "$*" in *kafka.tools.StorageTool*) exit 0;; esac\n'
        f"echo $$ > {tmp_path / 'pid'}\n{body}\n"
    )
    script.chmod(0o755)
    return str(script)


def test_start_up_failure_reports_exit_code_and_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    broker = LocalKafkaBroker(
        java=_fake_java(tmp_path, "echo 'simulated: disk on fire' >&2; exit 3")
    )
    with pytest.raises(BrokerError, match=r"(?s)exited with code 3.*simulated: disk on fire"):
        broker.start()
    assert not list(tmp_path.glob("tidelake-kafka-*"))


def test_broker_that_never_answers_is_killed_after_timeout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # Ignores SIGINT and SIGTERM (and so does its child): only a SIGKILL to the group ends both.
    java = _fake_java(
        tmp_path,
        f"trap '' INT TERM\necho still starting\nsleep 60 &\necho $! > {tmp_path / 'child'}\nwait",
    )
    broker = LocalKafkaBroker(java=java, startup_timeout_s=0.5, stop_grace_s=0.3)
    started = time.monotonic()
    with pytest.raises(BrokerError, match=r"(?s)did not come up .* within 0.5s.*still starting"):
        broker.start()
    assert time.monotonic() - started < 5
    for pid_file in ("pid", "child"):
        assert gone(int((tmp_path / pid_file).read_text()))
    assert not list(tmp_path.glob("tidelake-kafka-*"))


def test_running_broker_reads_state_file(tmp_path: Path) -> None:
    state_file = tmp_path / "broker.json"
    assert running_broker(state_file) is None
    state_file.write_text(json.dumps({"bootstrap_servers": "127.0.0.1:1", "pid": os.getpid()}))
    assert running_broker(state_file) == "127.0.0.1:1"
    dead = subprocess.Popen(["true"])
    dead.wait()
    state_file.write_text(json.dumps({"bootstrap_servers": "127.0.0.1:1", "pid": dead.pid}))
    assert running_broker(state_file) is None
    state_file.write_text("{not json")
    with pytest.raises(ConfigError, match="unreadable"):
        running_broker(state_file)
