"""The `tidelake` command line without a broker: light import, options checked before anything
connects, one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tidelake.platform.cli import main


def test_module_import_stays_light() -> None:
    heavy = ["pyspark", "dagster", "confluent_kafka", "google.protobuf", "pydantic", "tqdm"]
    code = f"import sys, tidelake.platform.cli; print([m for m in {heavy!r} if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_without_any_broker_the_error_says_what_to_do(no_kafka_env: Path) -> None:
    result = CliRunner().invoke(main, ["topics", "create"])
    assert result.exit_code == 2
    assert "KAFKA_BOOTSTRAP_SERVERS" in result.output and "tidelake broker" in result.output
    assert "Traceback" not in result.output


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


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["account_activity", "--use-cases"], "a flow's options"),
        (["call_events", "--use-cases", "--available-now"], "runs until stopped"),
        (["call_events", "--use-cases", "--restart-from-table"], "runs until stopped"),
    ],
)
def test_use_cases_in_the_flows_application_is_a_flows_option(
    no_kafka_env: Path, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(main, ["stream", *args])
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output
