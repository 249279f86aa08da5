"""Ctrl-C and SIGTERM end every long-running command cleanly: one line, no traceback, exit 0.

A terminal's Ctrl-C reaches the whole foreground process group; a service manager's SIGTERM
reaches the process or its group. Each command runs here as the leader of its own group, as from
a shell, and gets the signal both ways at random moments. The stream's table is exact
afterwards: every event once, whatever the moment (a batch committing included).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from lake_readers import read_delta
from live_stream import BackgroundProducer, cli_available_now
from process_states import signal_in_mask

from tidelake.platform.local.process_group import stop_group
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.polling import poll_until
from tidelake.streaming.settings import kafka_client_env

pytestmark = pytest.mark.slow

TIDELAKE = [sys.executable, "-m", "tidelake.platform.cli"]
SIGNALS = [(signal.SIGINT, "group"), (signal.SIGTERM, "process"), (signal.SIGTERM, "group")]


class Command:
    """A tidelake command in its own process group, its output in a file."""

    started: ClassVar[list[Command]] = []

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.start = log.stat().st_size if log.exists() else 0
        with log.open("a") as out:
            self.process = subprocess.Popen(
                [*TIDELAKE, *args],
                env={**env, "PYTHONFAULTHANDLER": "1"},
                cwd=env.get("TIDELAKE_HOME"),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        Command.started.append(self)

    def output(self) -> str:
        with self.log.open() as f:
            f.seek(self.start)
            return f.read()

    def wait_for(self, text: str, timeout_s: float = 180) -> None:
        def printed() -> bool | None:
            if text in self.output():
                return True
            assert self.process.poll() is None, f"exited early:\n{self.output()[-3000:]}"
            return None

        poll_until(
            printed,
            timeout_s=timeout_s,
            interval_s=0.05,
            timeout_error=lambda _: AssertionError(
                f"no {text!r} in {timeout_s:g} s:\n{self.output()}"
            ),
        )

    def wait_until_handled(self, sig: signal.Signals, timeout_s: float = 60) -> None:
        """Wait until the process has a handler for sig (its SigCgt mask in /proc)."""
        poll_until(
            lambda: True if signal_in_mask(self.process.pid, "SigCgt", sig) else None,
            timeout_s=timeout_s,
            interval_s=0.01,
            timeout_error=lambda _: AssertionError(f"no {sig.name} handler in {timeout_s:g} s"),
        )

    def stop(self, sig: signal.Signals, to: str, timeout_s: float = 240) -> str:
        """Send sig to the process or its group; its output once it has exited with 0.

        The timeout guards against a hang, above the longest stop that is not one: a signal
        during a cluster's start-up waits for that start (at most 90 s) and then its stop (at
        most 20 s). A command still running after it dumps its threads' stacks into the
        failure (PYTHONFAULTHANDLER, then SIGABRT)."""
        if to == "group":
            os.killpg(self.process.pid, sig)
        else:
            self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGABRT)
            self.process.wait(timeout=30)
            raise AssertionError(
                f"still running {timeout_s:g} s after {sig.name} to the {to}; its stacks:\n"
                f"{self.output()[-6000:]}"
            ) from None
        output = self.output()
        assert code == 0, f"exit {code} after {sig.name} to the {to}:\n{output[-3000:]}"
        assert "Traceback" not in output and "Error" not in output, output[-3000:]
        return output


@pytest.fixture(autouse=True)
def no_command_left_running() -> Iterator[None]:
    """Whatever a test asserts, the commands it started are stopped (SIGTERM, then SIGKILL):
    a failed assertion once left a kafka-cluster running for 16 minutes."""
    before = len(Command.started)
    yield
    for command in Command.started[before:]:
        stop_group(command.process, grace_s=30)


def _new_data_file(table: Path, known: set[Path], timeout_s: float = 120) -> None:
    """Return once the stream has written a data file it has not committed yet."""
    poll_until(
        lambda: True if set(table.rglob("*.parquet")) - known else None,
        timeout_s=timeout_s,
        interval_s=0.005,  # the file is uncommitted for a moment only
        timeout_error=lambda _: AssertionError(
            f"no new data file in {table} within {timeout_s:g} s"
        ),
    )


@pytest.mark.faults  # the graceful stop once: test_crash_safety's SIGTERM test
def test_the_stream_stops_after_its_batch_at_any_moment_and_the_table_is_exact(
    kafka_conf: dict[str, Any], call_events_topic: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        **kafka_client_env(kafka_conf),
        "TIDELAKE_LAKE": str(tmp_path / "lake"),
        "TIDELAKE_CHECKPOINTS": str(tmp_path / "checkpoints"),
        "TIDELAKE_TRIGGER_INTERVAL": "1 second",
    }
    log = tmp_path / "stream.log"
    table = tmp_path / "lake" / CALL_EVENTS.table
    seed = random.randrange(1_000_000)
    rng = random.Random(seed)
    producer = BackgroundProducer(
        CALL_EVENTS, kafka_conf, rate=400, duration_s=60, duplicate_share=0.05, seed=seed
    )
    producer.start()
    moments = []
    for round_, (sig, to) in enumerate(SIGNALS):
        stream = Command(["stream", "call_events"], env, log)
        stream.wait_for("spark session ready")
        if round_ % 2 == 0:  # while a batch commits: its data files are written, not committed
            _new_data_file(table, set(table.rglob("*.parquet")))
            moments.append("in a commit")
        else:
            time.sleep(rng.uniform(0.0, 4.0))
            moments.append("at random")
        output = stream.stop(sig, to)
        assert f"received {sig.name}: stopping after the current batch" in output, output[-2000:]
    report = producer.join(timeout=120)

    drained = cli_available_now(env)
    assert drained.returncode == 0, drained.stdout[-2000:] + drained.stderr[-2000:]
    keys = read_delta(table).column("call_sid").to_pylist()
    assert len(keys) == len(set(keys)), f"seed {seed}: duplicates after stops {moments}"
    assert set(keys) == set(report.keys), f"seed {seed}: lost rows after stops {moments}"


LOCAL_SERVICES = {
    "broker": (["broker"], "KAFKA_BOOTSTRAP_SERVERS="),
    "kafka-cluster": (["kafka-cluster", "--nodes", "1", "--min-insync", "1"], "data and logs in"),
    "spark-cluster": (["spark-cluster", "--workers", "1"], "master UI"),
    "serve": (["serve", "--port", "0"], "ingest service listening on"),
}


def _start_and_stop(
    name: str, sig: signal.Signals, to: str, while_starting: bool, bootstrap: str, root: Path
) -> None:
    """Start a local service in a home of its own, signal it while it starts (once tidelake
    handles SIGTERM; before, Python's defaults) or once it is ready, and see it exit 0. The
    signal comes up to a second later, at a moment of each case's own, the same in every run."""
    args, ready = LOCAL_SERVICES[name]
    home = root / f"home-{sig.name}-{to}"
    home.mkdir()
    env = {**os.environ, "TIDELAKE_HOME": str(home), "TIDELAKE_LAKE": str(home / "lake")}
    if name == "serve":
        env["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
    command = Command(args, env, root / f"{name}.log")
    if while_starting:
        command.wait_until_handled(signal.SIGTERM)
    else:
        command.wait_for(ready)
    time.sleep(random.Random(f"{name} {sig.name} {to} {while_starting}").uniform(0.0, 1.0))
    command.stop(sig, to)


@pytest.fixture(params=sorted(LOCAL_SERVICES))
def local_service(request: pytest.FixtureRequest) -> str:
    """A local service's name. The ingest service gets the call_events topic made anew: it
    refuses a topic with fewer partitions than the flow declares, and a client still reading
    after an earlier test deleted the topic can auto-create it with one."""
    if request.param == "serve":
        request.getfixturevalue("call_events_topic")
    return str(request.param)


def test_a_local_service_stops_on_ctrl_c_and_sigterm(
    local_service: str, kafka_conf: dict[str, Any], tmp_path: Path
) -> None:
    """A terminal's Ctrl-C while it starts, a service manager's SIGTERM to the group once it
    runs: the group's members get the signal too, which is where a stop goes wrong."""
    bootstrap = kafka_conf["bootstrap.servers"]
    _start_and_stop(local_service, signal.SIGINT, "group", True, bootstrap, tmp_path)
    _start_and_stop(local_service, signal.SIGTERM, "group", False, bootstrap, tmp_path)


@pytest.mark.faults  # the group's SIGTERM above covers the process's own handler
def test_a_local_service_stops_on_a_sigterm_to_itself(
    local_service: str, kafka_conf: dict[str, Any], tmp_path: Path
) -> None:
    _start_and_stop(
        local_service, signal.SIGTERM, "process", False, kafka_conf["bootstrap.servers"], tmp_path
    )
