"""The `tidelake` command line: fast to start, clean errors, working commands."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tidelake.platform.cli import main
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.flow import declared as flows
from tidelake.streaming.settings import kafka_client_config

TIDELAKE = Path(sys.executable).with_name("tidelake")


def test_help_starts_well_under_a_second() -> None:
    started = time.monotonic()
    result = subprocess.run([str(TIDELAKE), "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    assert time.monotonic() - started < 1.0
    for command in ("broker", "topics", "produce"):
        assert command in result.stdout


def test_kafka_settings_find_the_local_broker(
    no_kafka_env: Path, kafka_conf: dict[str, Any]
) -> None:
    no_kafka_env.mkdir()
    state = {"bootstrap_servers": kafka_conf["bootstrap.servers"], "pid": os.getpid()}
    (no_kafka_env / "broker.json").write_text(json.dumps(state))
    assert kafka_client_config()["bootstrap.servers"] == kafka_conf["bootstrap.servers"]


def test_topics_create_then_produce(
    monkeypatch: pytest.MonkeyPatch, kafka_conf: dict[str, Any], topic_name: str
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_conf["bootstrap.servers"])
    flow = dataclasses.replace(CALL_EVENTS, name="cli_test", topic=topic_name, topic_partitions=3)
    monkeypatch.setitem(flows.FLOWS, flow.name, flow)

    created = CliRunner().invoke(main, ["topics", "create", "cli_test"])
    assert created.exit_code == 0, created.output
    assert created.output == f"{topic_name}: 3 partitions (flow cli_test)\n"

    produced = CliRunner().invoke(
        main,
        ["produce", "cli_test", "--count", "500", "--days", "2", "--seed", "5", "--no-progress"],
    )
    assert produced.exit_code == 0, produced.output
    assert produced.stdout.startswith(f"produced 500 messages to {topic_name} in ")
    assert "good by date: " in produced.stdout

    mismatch = dataclasses.replace(flow, topic_partitions=5)
    monkeypatch.setitem(flows.FLOWS, flow.name, mismatch)
    refused = CliRunner().invoke(main, ["topics", "create", "cli_test"])
    assert refused.exit_code == 1
    assert "has 3 partitions, but 5 are declared" in refused.output
    assert "`tidelake topics add-partitions FLOW --to 5`" in refused.output

    grown = CliRunner().invoke(main, ["topics", "add-partitions", "cli_test", "--to", "5"])
    assert grown.exit_code == 0, grown.output
    assert grown.output == f"{topic_name}: 3 -> 5 partitions (flow cli_test)\n"
    assert CliRunner().invoke(main, ["topics", "create", "cli_test"]).exit_code == 0
