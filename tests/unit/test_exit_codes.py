"""The exit-code rule: each of tidelake's errors says its own exit code (1: the operation
failed; 2: a setting, a service or the data to fix first), the command group maps them in one
place, and anything else is a bug that keeps its traceback."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from typing import Any

import pytest
from click.testing import CliRunner

import tidelake.assets
import tidelake.streaming
from tidelake.platform import cli
from tidelake.streaming.errors import TidelakeError

EXIT_CODES = {
    "TidelakeError": 1,
    "SetupError": 2,
    "ConfigError": 2,
    "FlowSpecError": 2,
    "UseCaseError": 2,
    "InputMissingError": 2,
    "DescriptorSetError": 2,
    "JavaMissingError": 2,
    "JarsMissingError": 2,
    "StreamGuardError": 2,
    "SchemaChangeError": 2,
    "KafkaSourceError": 2,
    "KafkaAdminError": 1,
    "KafkaUnreachableError": 2,
    "KafkaAuthenticationError": 2,
    "KafkaAuthorizationError": 2,
    "TopicConfigError": 1,
    "TopicMissingError": 2,
    "DeltaCommitError": 1,
    "UnsupportedTableError": 2,
    "UntestedStorageError": 2,
    "TableReplacedError": 2,
    "UnsafeVacuumError": 2,
    "StartQueryAgainError": 1,
    "ConstraintsChangedError": 1,
    "StreamFailedError": 1,
    "BackfillError": 1,
    "OutsideRetentionError": 1,
    "TrainingError": 1,
    "DagsterWebError": 1,
    "DevStackError": 1,
    "ProduceError": 1,
    "ListenError": 2,
    "IngestDeliveryError": 1,
    "IngestServiceError": 1,
    "BrokerError": 1,
    "_PortTaken": 1,
    "KafkaSecurityError": 1,
    "SparkClusterError": 1,
    "ConditionalPutUnsupportedError": 2,
    "S3ServerError": 1,
    "S3ServerMissingError": 2,
    "SchemaRegistryUnavailableError": 2,
    "SchemaRegistrationError": 2,
    "NewWriterSchemasError": 1,
    "RegistryServerError": 1,
    "RegistryServerMissingError": 2,
}
PLATFORM_MODULES = [
    "tidelake.platform.cli",
    "tidelake.platform.dev.stack",
    "tidelake.platform.dev.produce",
    "tidelake.platform.dev.dagster_web",
    "tidelake.platform.calls.ingest_client",
    "tidelake.platform.calls.ingest_listen",
    "tidelake.platform.calls.ingest_edge",
    "tidelake.platform.local.kafka_broker",
    "tidelake.platform.local.kafka_security",
    "tidelake.platform.local.recorded_broker",
    "tidelake.platform.local.spark_cluster",
    "tidelake.platform.local.s3_server",
    "tidelake.platform.local.schema_registry",
    "tidelake.platform.local.certificates",
]


def _every_error() -> list[type[TidelakeError]]:
    for package in (tidelake.streaming, tidelake.assets):
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if not module.name.endswith("__main__"):
                importlib.import_module(module.name)
    for name in PLATFORM_MODULES:
        importlib.import_module(name)
    found, todo = [], [TidelakeError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_every_error_declares_the_exit_code_of_the_table() -> None:
    errors = {cls.__name__: cls.exit_code for cls in _every_error()}
    assert errors == EXIT_CODES


@pytest.mark.parametrize("cls", _every_error(), ids=lambda c: c.__name__)
def test_the_command_group_ends_each_error_in_one_line_with_its_code(cls: Any) -> None:
    with pytest.raises(cli.CliError) as ended, cli._clean_errors():
        raise cls.__new__(cls, "what is wrong and what to do")
    assert ended.value.exit_code == EXIT_CODES[cls.__name__]


def test_a_bug_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def bug(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug, not a failure tidelake understands")

    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setattr("tidelake.streaming.stream.runner.run_flow_stream", bug)
    result = CliRunner().invoke(cli.main, ["stream", "call_events", "--available-now"])
    assert isinstance(result.exception, RuntimeError)
    assert result.exit_code == 1


def test_a_stop_while_starting_exits_0_even_from_inside_an_exec_of_a_string() -> None:
    """CPython 3.11 exits by SIGINT once a plain KeyboardInterrupt has left an exec() of a
    string, caught or not; dataclasses runs one per class at import, where a start-up Ctrl-C
    lands. The start-up handler's own exception does not mark the process."""
    program = (
        "import os, signal\n"
        "from tidelake.platform.cli import _stop_while_starting\n"
        "signal.signal(signal.SIGINT, _stop_while_starting)\n"
        "try:\n"
        "    exec('import os, signal; os.kill(os.getpid(), signal.SIGINT)')\n"
        "except KeyboardInterrupt:\n"
        "    print('stopped')\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "stopped\n"), done.stderr
