"""The local Apache Kafka broker: starts isolated, works, keeps or removes its data, and leaves
no process behind."""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from process_states import gone

from tidelake.platform.local import kafka_broker
from tidelake.platform.local.kafka_broker import BrokerError, LocalKafkaBroker
from tidelake.platform.local.kafka_settings import new_cluster_id
from tidelake.streaming.kafka.admin import ensure_topic, quiet_client_config
from tidelake.streaming.kafka.broker_state import running_broker
from tidelake.streaming.stream.status import kafka_ends

TIDELAKE = Path(sys.executable).with_name("tidelake")


def _metadata(bootstrap: str):
    return AdminClient(quiet_client_config({"bootstrap.servers": bootstrap})).list_topics(timeout=5)


def test_start_and_stop_leave_no_process_or_directory() -> None:
    broker = LocalKafkaBroker()
    broker.start()
    pid, workdir = broker.pid, broker.workdir
    assert pid is not None and workdir is not None and workdir.is_dir()
    assert re.fullmatch(r"127\.0\.0\.1:\d+", broker.bootstrap_servers)
    metadata = _metadata(broker.bootstrap_servers)
    advertised = {f"{b.host}:{b.port}" for b in metadata.brokers.values()}
    assert advertised == {broker.bootstrap_servers}

    broker.stop()
    assert gone(pid)
    assert not workdir.exists()
    assert broker.pid is None and not broker.is_alive()
    broker.stop()  # a second stop is harmless
    with pytest.raises(BrokerError, match="not running"):
        _ = broker.bootstrap_servers


def test_a_cluster_id_starting_with_a_dash_formats(monkeypatch: pytest.MonkeyPatch) -> None:
    # 1 in 64 random ids starts with "-"; Kafka's StorageTool read one as an option and the
    # whole test session lost its broker
    dashed = "-" + new_cluster_id()[1:]
    monkeypatch.setattr(kafka_broker, "new_cluster_id", lambda: dashed)
    with LocalKafkaBroker() as broker:
        assert broker.cluster_id == dashed
        assert _metadata(broker.bootstrap_servers).cluster_id == dashed


def test_messages_round_trip_through_the_broker() -> None:
    with LocalKafkaBroker() as broker:
        conf = {"bootstrap.servers": broker.bootstrap_servers}
        ensure_topic(conf, "round-trip", 2)
        # at once, as `tidelake dev` does: a new topic's leaders are still being elected
        assert kafka_ends(conf, "round-trip") == {0: 0, 1: 0}
        producer = Producer(quiet_client_config(conf))
        producer.produce("round-trip", b"value", b"key", partition=1)
        assert producer.flush(10) == 0
        consumer = Consumer(quiet_client_config({**conf, "group.id": "round-trip"}))
        consumer.assign([TopicPartition("round-trip", 1, 0)])
        message = consumer.poll(10)
        consumer.close()
    assert message is not None and message.error() is None
    assert (message.key(), message.value()) == (b"key", b"value")


def test_a_kept_data_folder_survives_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "kafka"
    with LocalKafkaBroker(data_dir=data) as broker:
        conf = {"bootstrap.servers": broker.bootstrap_servers}
        cluster_id = broker.cluster_id
        ensure_topic(conf, "kept", 1)
        producer = Producer(quiet_client_config(conf))
        producer.produce("kept", b"still here", partition=0)
        assert producer.flush(10) == 0
    assert (data / "data" / "meta.properties").exists()
    with LocalKafkaBroker(data_dir=data) as broker:
        assert broker.cluster_id == cluster_id
        conf = {"bootstrap.servers": broker.bootstrap_servers}
        consumer = Consumer(quiet_client_config({**conf, "group.id": "kept"}))
        consumer.assign([TopicPartition("kept", 0, 0)])
        message = consumer.poll(15)
        consumer.close()
    assert message is not None and message.value() == b"still here"
    assert data.is_dir()


def _start_cli_broker(home: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "TIDELAKE_HOME": str(home)}
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    process = subprocess.Popen(
        [str(TIDELAKE), "broker"],
        cwd=home.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=60):
            process.kill()
            pytest.fail("`tidelake broker` printed nothing within 60s")
    line = process.stdout.readline().strip()
    match = re.fullmatch(r"KAFKA_BOOTSTRAP_SERVERS=(127\.0\.0\.1:\d+)", line)
    if not match:
        process.kill()
        pytest.fail(f"unexpected first line {line!r}; stderr: {process.communicate()[1]}")
    return process, match.group(1)


def test_cli_broker_runs_until_signalled_and_refuses_a_second_start(tmp_path: Path) -> None:
    """`tidelake broker` records where it runs, refuses a second start in the same home without
    touching the first, and on SIGTERM exits 0, leaving its kept data folder (Ctrl-C and
    SIGTERM to its group: test_terminal_stops)."""
    home = tmp_path / "home"
    process, address = _start_cli_broker(home)
    try:
        state_file = home / "broker.json"
        state = json.loads(state_file.read_text())
        assert state["bootstrap_servers"] == address
        assert running_broker(state_file) == address
        assert _metadata(address).brokers

        env = {**os.environ, "TIDELAKE_HOME": str(home)}
        second = subprocess.run(
            [str(TIDELAKE), "broker"], env=env, capture_output=True, text=True, timeout=60
        )
        assert second.returncode != 0
        assert f"already running at {address}" in second.stderr
        assert "Traceback" not in second.stderr
        assert running_broker(state_file) == address  # first one untouched

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert not state_file.exists()
    assert gone(state["pid"])
    assert Path(state["log"]).parent == home.resolve() / "kafka"  # the kept data folder
    assert (home / "kafka" / "data" / "meta.properties").exists()
