"""`tidelake dev` as a test starts and stops it, and what tests read of its runs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from tidelake.platform.dev.dagster_web import DagsterWeb
from tidelake.streaming.settings import EngineSettings

REPO = Path(__file__).resolve().parents[1]


def dev_env(root: Path, settings: EngineSettings, bootstrap_servers: str) -> dict[str, str]:
    """The environment of a test's `tidelake dev`: its own DAGSTER_HOME, TIDELAKE_HOME, lake and
    checkpoints under `root`, 1-second triggers, and the given Kafka."""
    return {
        **os.environ,
        "DAGSTER_HOME": str(root / "dagster_home"),
        "TIDELAKE_HOME": str(root / "home"),
        "TIDELAKE_LAKE": str(settings.lake),
        "TIDELAKE_CHECKPOINTS": str(settings.checkpoints),
        "TIDELAKE_TRIGGER_INTERVAL": "1 second",
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap_servers,
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
