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

from tidelake.platform.cli import kafka_conf as cli_kafka_conf
from tidelake.platform.cli import main
from tidelake.streaming.calls.flow import CALL_EVENTS
from tidelake.streaming.flow import registry as flows

TIDELAKE = Path(sys.executable).with_name("tidelake")


def test_module_import_stays_light() -> None:
    heavy = ["pyspark", "dagster", "confluent_kafka", "google.protobuf", "pydantic", "tqdm"]
    code = f"import sys, tidelake.platform.cli; print([m for m in {heavy!r} if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_help_starts_well_under_a_second() -> None:
    started = time.monotonic()
    result = subprocess.run([str(TIDELAKE), "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    assert time.monotonic() - started < 1.0
    for command in ("broker", "topics", "produce"):
        assert command in result.stdout


@pytest.fixture
def no_kafka_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No KAFKA_* settings, and an empty TIDELAKE_HOME: nothing to connect to."""
    for name in list(os.environ):
        if name.startswith("KAFKA_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    monkeypatch.setenv("TIDELAKE_HOME", str(home))
    return home


def test_without_any_broker_the_error_says_what_to_do(no_kafka_env: Path) -> None:
    result = CliRunner().invoke(main, ["topics", "create"])
    assert result.exit_code == 2
    assert "KAFKA_BOOTSTRAP_SERVERS" in result.output and "tidelake broker" in result.output
    assert "Traceback" not in result.output


def test_kafka_conf_finds_the_local_broker(no_kafka_env: Path, kafka_conf: dict[str, Any]) -> None:
    no_kafka_env.mkdir()
    state = {"bootstrap_servers": kafka_conf["bootstrap.servers"], "pid": os.getpid()}
    (no_kafka_env / "broker.json").write_text(json.dumps(state))
    assert cli_kafka_conf()["bootstrap.servers"] == kafka_conf["bootstrap.servers"]


def test_unreachable_broker_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, closed_port: int
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{closed_port}")
    result = CliRunner().invoke(main, ["produce", "call_events", "--count", "1"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"Error: Kafka is unreachable at bootstrap.servers=127.0.0.1:{closed_port}: "
        "connection refused"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--count", "10", "--malformed-share", "2"], "--malformed-share"),
        (["--count", "10", "--late-share", "-0.5"], "--late-share"),
        (["--count", "0"], "--count"),
        (["--count", "10", "--days", "0"], "--days"),
        (["--rate", "0", "--duration", "1"], "--rate"),
        (["--rate", "10", "--duration", "-1"], "--duration"),
        (["--count", "10", "--duration", "1"], "not both"),
        (["--rate", "10"], "give --count N, or --duration S"),
        (["--count", "10", "--kafka-timeout", "0"], "--kafka-timeout"),
    ],
)
def test_bad_produce_options_fail_fast_naming_the_option(
    no_kafka_env: Path, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(main, ["produce", "call_events", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_kafka_cluster_cannot_need_more_replicas_in_sync_than_it_has_nodes() -> None:
    result = CliRunner().invoke(main, ["kafka-cluster", "--nodes", "2", "--min-insync", "3"])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--min-insync': at most --nodes (2)" in result.output


def test_unknown_flow_lists_the_declared_ones(no_kafka_env: Path) -> None:
    for args in (["produce", "nope", "--count", "1"], ["topics", "create", "call_events", "nope"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2
        assert "unknown flow 'nope'; declared flows: call_events" in result.output


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
