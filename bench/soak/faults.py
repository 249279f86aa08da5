"""The soak's faults, one every --fault-every minutes in turn: the stream's JVM SIGKILLed (the
supervisor starts another run), the broker crashed and restarted, a compaction and a vacuum
racing the stream; each with when the stream's first batch came after it and when it caught up."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from soak.platform import Soak
from soak.processes import live_run_workers, platform_processes
from tidelake.streaming.polling import poll_until

FAULTS = ("kill-stream", "restart-broker", "maintenance-race")
RECOVERY_TIMEOUT_S = 900
"""How long a fault's recovery is followed: its first batch, then its lag back to the baseline."""


@dataclass
class FaultRecord:
    name: str
    at_s: float
    detail: str = ""
    first_batch_after_s: float | None = None
    caught_up_after_s: float | None = None


def run_fault(soak: Soak, name: str, baseline_lag: float, rate: float) -> FaultRecord:
    record = FaultRecord(name, time.time() - soak.started)
    began = time.time()
    if name == "kill-stream":
        pids = [
            p.pid
            for p, role in platform_processes(soak, live_run_workers(soak.dagster_home))
            if role == "stream-jvm"
        ]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        record.detail = f"SIGKILL to the stream's JVM {pids}"
    elif name == "restart-broker":
        soak.cluster.kill(1)
        time.sleep(5)
        soak.cluster.restart(1)
        record.detail = f"broker SIGKILLed, restarted after {time.time() - began:.1f} s"
    else:
        record.detail = maintenance_race(soak)
        return record
    last_batch = _last_batch_time(soak)
    threshold = max(baseline_lag * 1.5, 2 * rate)

    def caught_up() -> bool | None:
        now_batch = _last_batch_time(soak)
        if record.first_batch_after_s is None and now_batch and now_batch > max(began, last_batch):
            record.first_batch_after_s = now_batch - began
        lag = soak.lag()
        if record.first_batch_after_s is None or lag is None or lag > threshold:
            return None
        record.caught_up_after_s = time.time() - began
        return True

    with contextlib.suppress(TimeoutError):  # the record says it did not recover
        poll_until(
            caught_up, timeout_s=RECOVERY_TIMEOUT_S, interval_s=2, timeout_error=TimeoutError
        )
    return record


def _last_batch_time(soak: Soak) -> float:
    """When the stream's newest micro-batch ended: its commit file's time."""
    commits = soak.checkpoint / "commits"
    try:
        return max((p.stat().st_mtime for p in commits.iterdir() if p.name.isdigit()), default=0)
    except FileNotFoundError:
        return 0.0


def maintenance_race(soak: Soak) -> str:
    """A compaction of today and a vacuum of the table, each a process of its own, as the
    maintenance assets run them, while the stream commits."""
    today = datetime.now(UTC).date().isoformat()
    code = (
        "import json,sys,time\n"
        "from tidelake.streaming.delta.maintenance import compact_partition, vacuum_table\n"
        "t=time.time(); c=compact_partition(sys.argv[1], sys.argv[2], sys.argv[3])\n"
        "v=vacuum_table(sys.argv[1])\n"
        "print(json.dumps({'compaction_s': round(c.seconds,1), 'files_before': c.before.files,"
        " 'files_after': c.after.files, 'vacuum_removed': v.removed_files,"
        " 'seconds': round(time.time()-t,1)}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(soak.table), soak.flow.partition_column, today],
        env=soak.env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        return f"maintenance failed: {done.stderr.strip().splitlines()[-1:]}"
    return done.stdout.strip()
