"""`tidelake dev` as a test starts and stops it, and what tests read of its runs."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

from tidelake.platform.dev.dagster_web import DagsterWeb, wait_for
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.stream.query import stream_name

REPO = Path(__file__).resolve().parents[1]
JOB = stream_name(CALL_EVENTS)
QUEUE_PASS = re.compile(
    r"QueuedRunCoordinatorDaemon - \S*INFO\S* - Priority sorting and checking tag concurrency"
)
"""The line Dagster's run queue logs on each pass over the queued runs (about every 5 s)."""


AUTOMATION_INTERVAL_S = 5
"""Seconds between ticks of tidelake_automation in a test's `tidelake dev`."""


def dev_env(root: Path, settings: EngineSettings, bootstrap_servers: str) -> dict[str, str]:
    """The environment of a test's `tidelake dev`: its own DAGSTER_HOME, TIDELAKE_HOME, lake and
    checkpoints under `root`, 1-second triggers, sensors ticking every 5 s instead of 20 and 30
    (what the tests wait on is a tick's doing, not its interval), and the given Kafka."""
    return {
        **os.environ,
        "DAGSTER_HOME": str(root / "dagster_home"),
        "TIDELAKE_HOME": str(root / "home"),
        "TIDELAKE_LAKE": str(settings.lake),
        "TIDELAKE_CHECKPOINTS": str(settings.checkpoints),
        "TIDELAKE_TRIGGER_INTERVAL": "1 second",
        "TIDELAKE_SUPERVISOR_INTERVAL": "5",
        "TIDELAKE_AUTOMATION_INTERVAL": str(AUTOMATION_INTERVAL_S),
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap_servers,
        "TIDELAKE_PLAN_USE_CASE_SCHEMAS": "true",  # as users run it
    }


def start_dev(
    env: dict[str, str], log: Path, port: int, ingest_port: int
) -> subprocess.Popen[bytes]:
    """`tidelake dev` without demo producers, in its own process group, output to `log`."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tidelake.platform.cli",
                "dev",
                "--rate",
                "0",
                "--port",
                str(port),
                "--ingest-port",
                str(ingest_port),
            ],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_dev(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C, as a user stops it; whatever is left after 90 s is killed."""
    if process.poll() is not None:
        return
    children = psutil.Process(process.pid).children(recursive=True)
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=90)
    except subprocess.TimeoutExpired:
        process.kill()
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.kill()


def stream_worker_pid(web: DagsterWeb, run_id: str) -> int:
    """The process executing a stream run (the Spark driver), as the run's log names it."""
    messages = web.run_messages(run_id)
    (pid,) = {int(m.split()[3].rstrip(":")) for m in messages if m.startswith("stream worker pid")}
    return pid


@dataclass
class RunningDev:
    """A test's running `tidelake dev`: its process, UI, lake and log, and what tests wait for in
    them (call_events' stream runs, passes of the run queue)."""

    process: subprocess.Popen[bytes]
    web: DagsterWeb
    settings: EngineSettings
    log: Path

    @property
    def table_uri(self) -> str:
        return self.settings.table_uri(CALL_EVENTS.table)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def started_run(self, other_than: str | None = None, timeout_s: float = 240) -> str:
        """The id of a STARTED run of the stream job other than `other_than`, once there is one."""

        def probe() -> str | None:
            assert self.process.poll() is None, f"tidelake dev exited:\n{self.tail()}"
            runs = [r for r in self.web.runs(JOB, ["STARTED"]) if r["runId"] != other_than]
            return runs[0]["runId"] if runs else None

        return wait_for(probe, timeout_s, f"a STARTED run of {JOB}\n{self.tail()}", 1)

    def streaming(self, run_id: str, timeout_s: float = 180) -> None:
        """Wait until run_id's query runs (its progress lines): before that, the run is starting
        its Spark session, and a termination then is not the stream's to stop gracefully."""
        progress = f"{run_id} - run_{JOB} - {JOB}"

        def probe() -> bool | None:
            return True if progress in self.log.read_text(errors="replace") else None

        wait_for(probe, timeout_s, f"the query of run {run_id} running\n{self.tail()}", 1)

    def queue_passes(self) -> int:
        """Passes of Dagster's run queue over queued runs so far (its own line in the log)."""
        return len(QUEUE_PASS.findall(self.log.read_text(errors="replace")))

    def wait_for_queue_passes(self, passes: int, timeout_s: float = 120) -> None:
        """Return once Dagster's run queue has passed over the queued runs `passes` more times:
        a run still QUEUED then was held back, not merely not reached yet."""
        target = self.queue_passes() + passes
        wait_for(
            lambda: True if self.queue_passes() >= target else None,
            timeout_s,
            f"{passes} passes of the run queue\n{self.tail()}",
            0.5,
        )
