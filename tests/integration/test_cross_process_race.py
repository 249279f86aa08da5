"""The stream, backfills, compactions and vacuums as separate processes on one table.

Each process commits to the same Delta log, as Dagster runs do: on the local filesystem (an
atomic rename) and on the S3 server (a conditional PUT). Every commit must land once (no
version written twice, none lost) and every record exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from lake_readers import read_delta
from live_stream import BackgroundProducer
from stores import ON_BOTH_STORES

from tidelake.platform.dev.dagster_web import wait_for
from tidelake.platform.dev.produce import produce_demo_events
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.settings import kafka_client_env
from tidelake.streaming.storage.location import Location

ROUNDS = 3

BACKFILL = """
import sys
from tidelake.streaming.batch.backfill import backfill_dates
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.spark.session import build_spark_session
from tidelake.streaming.settings import kafka_client_config, load_engine_settings
settings, spark = load_engine_settings(), build_spark_session()
for line in sys.stdin:  # a round: the dates to backfill, comma-separated
    backfill_dates(spark, CALL_EVENTS, line.strip().split(","), settings, kafka_client_config())
    print("backfilled", flush=True)
"""

COMPACT = """
import sys
from tidelake.streaming.delta.maintenance import compact_partition
for day in sys.argv[2].split(","):
    compact_partition(sys.argv[1], "date", day)
"""

VACUUM = """
import sys
from tidelake.streaming.delta.maintenance import vacuum_table
vacuum_table(sys.argv[1])
"""


def _python(
    script: str, *args: str, env: dict[str, str], stdin: int | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(proc: subprocess.Popen[str], name: str) -> None:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"{name} failed:\n{out[-3000:]}"


# A fault scenario (make bench-faults), on both stores: writers of separate processes meet only
# through the store's commit (S3's conditional put; on a local disk AtomicLocalLogStore's hard
# link, test_jvm_jars). In make test, the conflicts one at a time: test_commit_races,
# test_table_maintenance and test_backfill (a backfill while the stream writes the same day)
@pytest.mark.faults
@ON_BOTH_STORES
def test_stream_backfill_compaction_and_vacuum_in_separate_processes(
    kafka_conf: dict[str, Any], call_events_topic: str, storage_roots: tuple[str, str]
) -> None:
    flow = CALL_EVENTS
    lake, checkpoints = storage_roots
    env = {
        **os.environ,
        **kafka_client_env(kafka_conf),
        "TIDELAKE_LAKE": lake,
        "TIDELAKE_CHECKPOINTS": checkpoints,
        "TIDELAKE_MAX_OFFSETS_PER_TRIGGER": "500",
    }
    table = f"{lake}/{flow.table}"
    history = produce_demo_events(
        flow, kafka_conf, count=1500, days=2, seed=31, progress=False, collect_keys=True
    )
    stream = subprocess.Popen(
        [sys.executable, "-m", "tidelake.platform.cli", "stream", flow.name],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_for_rows(table, 1, stream)
        producer = BackgroundProducer(flow, kafka_conf, count=3000, rate=100, seed=32)
        producer.start()
        days = ",".join(sorted({*history.by_date, datetime.now(UTC).date().isoformat()}))
        # one backfill process takes every round (a JVM started once, not once a round), the
        # compaction and the vacuum of a round start with its backfill
        backfill = _python(BACKFILL, env=env, stdin=subprocess.PIPE)
        assert backfill.stdin is not None and backfill.stdout is not None
        for _ in range(ROUNDS):
            backfill.stdin.write(days + "\n")
            backfill.stdin.flush()
            maintenance = {
                "compaction": _python(COMPACT, table, days, env=env),
                "vacuum": _python(VACUUM, table, env=env),
            }
            for name, proc in maintenance.items():
                _finish(proc, name)
            said = []
            while (line := backfill.stdout.readline()) and line.strip() != "backfilled":
                said.append(line)
            assert line, "the backfill exited:\n" + "".join(said)[-3000:]
        _finish(backfill, "backfill")
        live = producer.join()
        expected = history.good + live.good
        _wait_for_rows(table, expected, stream)
    finally:
        stream.send_signal(signal.SIGTERM)
        out, _ = stream.communicate(timeout=120)
    assert stream.returncode == 0, out[-3000:]

    keys = read_delta(table).column("call_sid").to_pylist()
    assert len(keys) == expected == len(set(keys))
    assert set(keys) == set(history.keys) | set(live.keys)
    _assert_every_version_intact(table)


def _wait_for_rows(table: str, rows: int, stream: subprocess.Popen[str]) -> None:
    def reached() -> bool | None:
        assert stream.poll() is None, f"the stream exited:\n{stream.stdout.read()[-3000:]}"  # type: ignore[union-attr]
        try:
            return True if read_delta(table).num_rows >= rows else None
        except Exception:  # no table before the stream's first commit
            return None

    wait_for(reached, 300, f"{rows} rows in {table}", 1)


def _assert_every_version_intact(table: str) -> None:
    """Commit files 0..latest all exist and parse, each version loads, and the latest snapshot's
    files exist."""
    log = Location(table) / "_delta_log"
    latest = open_table(table).version()
    for version in range(latest + 1):
        commit = log / f"{version:020d}.json"
        assert commit.exists(), f"version {version} is missing from the log"
        for line in commit.read_text().splitlines():
            json.loads(line)
        open_table(table, version=version)
    for uri in open_table(table).file_uris():
        assert Location(uri.removeprefix("file://")).exists(), uri
