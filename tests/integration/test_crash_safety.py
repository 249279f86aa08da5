"""The stream process dies hard, mid-ingest, several times: nothing is lost or duplicated."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from deltalake.exceptions import TableNotFoundError
from lake_readers import delta_version, duckdb_query, read_delta
from live_stream import produce_and_stream, run_available_now
from process_states import kill_tree
from stores import ON_BOTH_STORES

from tidelake.platform.dev.dagster_web import wait_for
from tidelake.platform.dev.produce import ProduceReport, produce_demo_events
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.settings import EngineSettings, kafka_client_env

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "tidelake.platform.cli", "stream", "call_events"]


def _env(kafka_conf: dict, roots: tuple[str, str]) -> dict[str, str]:
    return {
        **os.environ,
        **kafka_client_env(kafka_conf),
        "TIDELAKE_LAKE": roots[0],
        "TIDELAKE_CHECKPOINTS": roots[1],
    }


def _version(table: str) -> int:
    try:
        return delta_version(table)
    except TableNotFoundError:
        return -1


def _start(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen:
    with log.open("a") as out:
        return subprocess.Popen(
            [*CLI, *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _wait_for_commit_after(table: str, version: int, proc: subprocess.Popen, log: Path) -> None:
    def committed() -> bool | None:
        assert proc.poll() is None, f"stream exited early:\n{log.read_text()[-3000:]}"
        return True if _version(table) > version else None

    wait_for(committed, 180, f"a commit after version {version}", 0.2)


# A fault scenario (make bench-faults), on both stores: the commit protocol differs per store.
# In make test, the crash between the Delta commit and Spark's commit log below makes the worst
# window certain
@pytest.mark.faults
@ON_BOTH_STORES
def test_sigkill_at_random_moments_loses_and_duplicates_nothing(
    kafka_conf, kafka_as, call_events_topic, tmp_path, storage_roots
):
    env = _env(kafka_as("stream", [call_events_topic]), storage_roots)
    log = tmp_path / "stream.log"
    table = f"{storage_roots[0]}/call_events"
    seed = random.randrange(1_000_000)
    rng = random.Random(seed)
    produced: list[ProduceReport] = []
    producer = threading.Thread(
        target=lambda: produced.append(
            produce_demo_events(
                CALL_EVENTS,
                kafka_conf,
                rate=1500,
                duration_s=40,
                malformed_share=0.02,
                late_share=0.1,
                seed=seed,
                progress=False,
                collect_keys=True,
            )
        )
    )
    producer.start()
    kills = []
    for _ in range(3):
        before = _version(table)
        proc = _start(env, log, "--max-offsets-per-trigger", "2000")
        _wait_for_commit_after(table, before, proc, log)
        time.sleep(rng.uniform(0.0, 1.5))  # land anywhere in the batch cycle
        kill_tree(proc.pid)  # the driver and its JVM (in a session of its own) at once
        proc.wait(timeout=30)
        kills.append(_version(table))
    producer.join(timeout=120)
    (report,) = produced

    drain = _start(env, log, "--available-now")
    assert drain.wait(timeout=300) == 0, log.read_text()[-3000:]

    rows = read_delta(table)
    keys = rows.column("call_sid").to_pylist()
    assert len(kills) == 3 and kills[0] < kills[-1], f"seed {seed}: kills at versions {kills}"
    assert len(keys) == len(set(keys)), f"seed {seed}: duplicates after kills at {kills}"
    assert set(keys) == set(report.keys), f"seed {seed}: lost rows after kills at {kills}"
    assert read_delta(f"{storage_roots[0]}/call_events_quarantine").num_rows == report.malformed


def test_sigterm_stops_gracefully_and_the_next_run_resumes(
    spark, kafka_conf, kafka_as, call_events_topic, tmp_path
):
    """The CLI stops on SIGTERM after its batch; the next run (this process's Spark: what starts
    it is not the subject) resumes from the checkpoint it left."""
    stream_conf = kafka_as("stream", [call_events_topic])
    settings = EngineSettings(lake=tmp_path / "lake", checkpoints=tmp_path / "checkpoints")
    env = _env(stream_conf, (settings.lake, settings.checkpoints))
    log = tmp_path / "stream.log"
    table = str(tmp_path / "lake" / "call_events")
    first = produce_demo_events(CALL_EVENTS, kafka_conf, count=500, seed=5, progress=False)
    proc = _start(env, log)
    _wait_for_commit_after(table, -1, proc, log)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    assert "stopping" in log.read_text()

    second = produce_demo_events(CALL_EVENTS, kafka_conf, count=300, seed=6, progress=False)
    run_available_now(spark, CALL_EVENTS, settings, stream_conf)
    keys = read_delta(table).column("call_sid").to_pylist()
    assert len(keys) == len(set(keys)) == first.good + second.good


def test_a_crash_between_the_delta_commit_and_sparks_commit_log_replays_cleanly(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    """The window a random SIGKILL hits only sometimes, made certain: Delta holds the batch, the
    checkpoint does not know it. The replay must skip the write, still run the batch (its
    deduplication state), and neither fail nor duplicate."""
    stream = produce_and_stream(
        spark,
        flow,
        engine_settings,
        kafka_conf,
        count=300,
        malformed_share=0.0,
        late_share=0.0,
        seed=8,
    ).stream
    version = delta_version(stream.table_uri)
    commits = Path(stream.checkpoint) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()  # as if the process died right after the Delta commit
    (commits / f".{last}.crc").unlink(missing_ok=True)

    run_available_now(spark, flow, engine_settings, kafka_conf)
    assert delta_version(stream.table_uri) == version  # nothing committed twice
    assert (commits / str(last)).exists()
    assert duckdb_query(
        f"select count(*), count(distinct call_sid) from delta_scan('{stream.table_uri}')"
    ) == [(300, 300)]
