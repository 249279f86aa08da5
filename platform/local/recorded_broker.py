"""The broker that `tidelake broker` and `tidelake dev` run for this machine's other commands:
its data kept under $TIDELAKE_HOME/kafka, its address recorded in $TIDELAKE_HOME while it
runs, so they find it without configuration."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

from tidelake.platform.local.kafka_broker import BrokerError, LocalKafkaBroker
from tidelake.streaming.kafka import broker_state as kafka_broker_state
from tidelake.streaming.kafka.broker_state import running_broker, write_broker_state
from tidelake.streaming.settings import host_settings
from tidelake.streaming.stream.stop_signals import graceful_stop_signals

log = logging.getLogger(__name__)


def kept_data_dir() -> Path:
    """Data folder of the broker that `tidelake broker` and `tidelake dev` run."""
    return host_settings().home / "kafka"


def broker_state_file() -> Path:
    """Where `tidelake broker` and `tidelake dev` record the broker they run."""
    return kafka_broker_state.broker_state_file(host_settings().home)


@contextlib.contextmanager
def recorded_broker(state_file: Path, data_dir: Path | None = None) -> Iterator[LocalKafkaBroker]:
    """A started broker whose address is in state_file while it runs (removed on exit)."""
    with LocalKafkaBroker(data_dir=data_dir) as broker:
        assert broker.pid is not None and broker.log_path is not None
        write_broker_state(state_file, broker.bootstrap_servers, broker.pid, broker.log_path)
        try:
            yield broker
        finally:
            with contextlib.suppress(FileNotFoundError):
                state_file.unlink()


def run_foreground(state_file: Path, data_dir: Path) -> None:
    """Run a broker until SIGINT/SIGTERM, for `tidelake broker`.

    Prints `KAFKA_BOOTSTRAP_SERVERS=...` on stdout and records the address in state_file, so
    other `tidelake` commands on this machine find the broker without configuration.
    """
    existing = running_broker(state_file)
    if existing is not None:
        raise BrokerError(
            f"a local broker is already running at {existing} (recorded in {state_file}); "
            "stop it first, or use it"
        )
    with (
        graceful_stop_signals(log, stopping="stopping the broker") as stop,
        recorded_broker(state_file, data_dir) as broker,
    ):
        print(f"KAFKA_BOOTSTRAP_SERVERS={broker.bootstrap_servers}", flush=True)
        print(
            f"Local Apache Kafka broker ready in {broker.startup_s:.1f}s; data in {data_dir}, "
            f"log in {broker.log_path}. Ctrl-C to stop.",
            file=sys.stderr,
            flush=True,
        )
        while not stop.wait(0.2):
            if not broker.is_alive():
                raise BrokerError(
                    f"the local broker exited unexpectedly; its log ends with:\n{broker.log_tail()}"
                )
