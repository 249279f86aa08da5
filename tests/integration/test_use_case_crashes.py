"""Use cases' streams die hard, four times each, while the flow lands events: nothing is lost,
duplicated or counted twice.

`tidelake stream account_activity` (upsert) and `tidelake stream failed_calls` (append) run as
processes of their own beside the flow's stream (the test's session) fed by a live producer;
each is SIGKILLed, with its JVM, at a random moment after a commit of its own, four times, then
run once more until it has read the whole input. A fault scenario (`make bench-faults`): the
replay of a batch whose output committed before Spark's checkpoint is made certain in `make
test` by test_use_cases.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from deltalake.exceptions import TableNotFoundError
from failed_calls_use_case import FAILED_CALLS
from lake_readers import delta_version, read_delta
from live_stream import BackgroundProducer, RestartingStream, wait_for_rows
from process_states import kill_tree
from use_case_tables import activity_differences

from tidelake.platform.dev.dagster_web import wait_for
from tidelake.streaming.calls.use_cases import ACCOUNT_ACTIVITY
from tidelake.streaming.usecase.position import committed_input_version
from tidelake.streaming.usecase.spec import UseCaseSpec

TESTS = Path(__file__).resolve().parents[1]
KILLS = 4


def _version(table: str) -> int:
    try:
        return delta_version(table)
    except TableNotFoundError:
        return -1


def _start(use_case: UseCaseSpec, settings: Any, log: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "TIDELAKE_LAKE": str(settings.lake),
        "TIDELAKE_CHECKPOINTS": str(settings.checkpoints),
        "TIDELAKE_USE_CASE_MODULES": "failed_calls_use_case",
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "tidelake.platform.cli", "stream", use_case.name]
    with log.open("a") as out:
        return subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


@pytest.mark.faults
@pytest.mark.timeout(1800)
def test_four_sigkills_of_each_use_case_lose_and_duplicate_nothing(
    spark: Any, kafka_conf: Any, flow: Any, engine_settings: Any, tmp_path: Path
) -> None:
    settings = engine_settings
    seed = random.randrange(1_000_000)
    rng = random.Random(seed)
    use_cases = (ACCOUNT_ACTIVITY, FAILED_CALLS)
    logs = {u.name: tmp_path / f"{u.name}.log" for u in use_cases}
    tables = {u.name: settings.table_uri(u.table) for u in use_cases}
    input_uri = settings.table_uri(flow.table)
    producer = BackgroundProducer(
        flow, kafka_conf, rate=500, duration_s=150, malformed_share=0, late_share=0.1, seed=seed
    )
    kills: dict[str, list[int]] = {u.name: [] for u in use_cases}
    with RestartingStream(spark, flow, settings, kafka_conf) as stream:
        producer.start()
        wait_for(lambda: True if _version(input_uri) >= 0 else None, 300, "the flow's table")
        for _ in range(KILLS):
            before = {name: _version(uri) for name, uri in tables.items()}
            procs = {u.name: _start(u, settings, logs[u.name]) for u in use_cases}

            def committed(procs: dict = procs, before: dict = before) -> bool | None:
                for name, proc in procs.items():
                    assert proc.poll() is None, logs[name].read_text()[-3000:]
                return True if all(_version(tables[n]) > before[n] for n in procs) else None

            wait_for(committed, 300, "a commit of each use case", 0.2)
            time.sleep(rng.uniform(0.0, 2.0))  # land anywhere in the batch cycle
            for name, proc in procs.items():
                kill_tree(proc.pid)
                proc.wait(timeout=30)
                kills[name].append(_version(tables[name]))
        report = producer.join(timeout=300)
        assert wait_for_rows(input_uri, report.good, 300) == report.good
        assert not stream.failures, stream.failures

    last = delta_version(input_uri)
    procs = {u.name: _start(u, settings, logs[u.name]) for u in use_cases}

    def read_all() -> bool | None:
        done = [
            committed_input_version(settings.checkpoint_uri(u.checkpoint_name)) for u in use_cases
        ]
        return True if all(v is not None and v >= last for v in done) else None

    wait_for(read_all, 600, f"both use cases past input version {last}", 0.5)
    for proc in procs.values():
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0

    calls = read_delta(input_uri).to_pandas()
    assert len(calls) == report.good
    differences = activity_differences(settings, calls)
    assert differences == {}, f"seed {seed}, kills at {kills}: {differences}"
    failed = read_delta(tables[FAILED_CALLS.name]).to_pandas()
    assert failed["call_sid"].is_unique, f"seed {seed}, kills at {kills}"
    assert set(failed["call_sid"]) == set(calls[calls["call_state"] == "failed"]["call_sid"])
    for name, versions in kills.items():
        assert len(versions) == KILLS and versions[0] < versions[-1], (name, versions)
    print(f"seed {seed}: {report.good} events; kills at use-case table versions {kills}")
