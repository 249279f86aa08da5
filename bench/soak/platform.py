"""The platform under soak: a Kafka node of its own, `tidelake dev` against it (without the demo
producer), the soak's producer process, and the tables read back with DuckDB at the end."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path

from soak.flow import LATENESS_ENV, MODULE, soak_flow
from tidelake.platform.local.kafka_cluster import LocalKafkaCluster
from tidelake.platform.local.ports import free_ports
from tidelake.platform.local.process_group import stop_group
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.stream.progress_log import progress_file
from tidelake.streaming.stream.query import stream_name
from tidelake.streaming.stream.status import committed_batch, kafka_ends, stream_lag

REPO = Path(__file__).resolve().parents[2]
DEV_STOP_GRACE_S = 240
"""How long `tidelake dev` has to stop its runs and Dagster before its group is killed."""
PRODUCER_TIMEOUT_MS = 600_000
"""How long the soak's producer retries an event: past the broker fault's outage. A broker
SIGKILLed after 50 minutes at 6,000 events/s took 88.5 s to serve again (it recovers its logs),
past the 60 s that `tidelake produce` gives an event, and the producer gave up (sixteenth run)."""


@dataclass
class Soak:
    """The running platform's places and processes."""

    work: Path
    env: dict[str, str]
    flow: FlowSpec
    cluster: LocalKafkaCluster
    dev: subprocess.Popen[bytes]
    producer: multiprocessing.process.BaseProcess | None = None
    started: float = field(default_factory=time.time)

    @property
    def stream_job(self) -> str:
        """The Dagster job of the flow's always-on stream, also its query's name."""
        return stream_name(self.flow)

    @property
    def lake(self) -> Path:
        return self.work / "lake"

    @property
    def table(self) -> Path:
        return self.lake / self.flow.table

    @property
    def quarantine(self) -> Path:
        return self.lake / self.flow.quarantine_table

    @property
    def checkpoint(self) -> Path:
        return self.work / "checkpoints" / self.flow.name

    @property
    def progress_file(self) -> Path:
        return progress_file(self.work / "progress", self.stream_job)

    @property
    def dagster_home(self) -> Path:
        return self.work / "dagster"

    def kafka_conf(self) -> dict[str, str]:
        return {"bootstrap.servers": self.cluster.bootstrap_servers}

    def lag(self) -> int | None:
        """Records on the topic the stream's checkpoint has not committed; None if unknown."""
        try:
            ends = kafka_ends(self.kafka_conf(), self.flow.topic, 5.0)
        except Exception:
            return None
        done = committed_batch(str(self.checkpoint), self.flow.topic)
        return stream_lag(ends, done.offsets if done else {}).total


def fed_flow(lateness_min: float | None) -> FlowSpec:
    """The flow the soak feeds: call_events as shipped, or with `lateness_min` minutes of
    allowed lateness as a flow of its own (soak/flow.py)."""
    return CALL_EVENTS if lateness_min is None else soak_flow(timedelta(minutes=lateness_min))


@contextmanager
def platform(work: Path, trigger_interval: str, flow: FlowSpec) -> Iterator[Soak]:
    cluster = LocalKafkaCluster(1, min_insync=1, folder=work / "kafka")
    cluster.start()
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": cluster.bootstrap_servers,
        "TIDELAKE_HOME": str(work / "home"),
        "TIDELAKE_LAKE": str(work / "lake"),
        "TIDELAKE_CHECKPOINTS": str(work / "checkpoints"),
        "TIDELAKE_PROGRESS_LOG": str(work / "progress"),
        "TIDELAKE_TRIGGER_INTERVAL": trigger_interval,
        "DAGSTER_HOME": str(work / "dagster"),
    }
    if flow is not CALL_EVENTS:  # the soak's own flow, declared as a deployment declares one
        env[LATENESS_ENV] = str(flow.allowed_lateness.total_seconds())
        env["TIDELAKE_FLOW_MODULES"] = MODULE
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO / "bench"), os.environ.get("PYTHONPATH")) if p
        )
    dagster_port, ingest_port = free_ports(2)
    command = [
        str(Path(sys.executable).with_name("tidelake")),
        "dev",
        "--rate",
        "0",
        "--port",
        str(dagster_port),
        "--ingest-port",
        str(ingest_port),
    ]
    log = (work / "dev.log").open("wb")
    dev = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    soak = Soak(work, env, flow, cluster, dev)
    try:
        yield soak
    finally:
        if soak.producer is not None and soak.producer.is_alive():
            soak.producer.terminate()
        stop_group(dev, DEV_STOP_GRACE_S, stop_signal=signal.SIGINT)
        cluster.stop()
        log.close()


def produce(
    bootstrap: str,
    lateness_min: float | None,
    rate: float,
    seconds: float,
    shares: dict[str, float],
    report: str,
) -> None:
    """The producer process: demo CallEvents of the fed flow at `rate` for `seconds`, its report
    to a file."""
    from tidelake.platform.dev.produce import produce_demo_events

    result = produce_demo_events(
        fed_flow(lateness_min),
        {"bootstrap.servers": bootstrap, "message.timeout.ms": PRODUCER_TIMEOUT_MS},
        rate=rate,
        duration_s=seconds,
        progress=False,
        seed=38,
        **shares,
    )
    Path(report).write_text(json.dumps(asdict(result), default=str))


def read_back(soak: Soak) -> dict[str, int]:
    """The tables as DuckDB reads them (its delta extension; no Spark, no delta-rs)."""
    import duckdb
    import duckdb_extension_delta

    extension = next(Path(duckdb_extension_delta.__file__).parent.rglob("*.duckdb_extension"))
    con = duckdb.connect()
    try:
        con.load_extension(str(extension))
        rows, distinct = con.sql(
            f"select count(*), count(distinct call_sid) from delta_scan('{soak.table}')"
        ).fetchone()  # type: ignore[misc]
        (quarantined,) = con.sql(f"select count(*) from delta_scan('{soak.quarantine}')").fetchone()  # type: ignore[misc]
    finally:
        con.close()
    return {"rows": rows, "distinct_keys": distinct, "quarantined": quarantined}
