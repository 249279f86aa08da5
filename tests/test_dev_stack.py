"""Pieces of `tidelake dev` that do not need the whole stack (which test_platform_e2e runs)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

from tidelake.platform.dev_stack import dagster_home, stop_process_group

REPO = Path(__file__).resolve().parents[1]


def test_dagster_home_links_the_platform_instance_settings(tmp_path: Path) -> None:
    home = dagster_home({"DAGSTER_HOME": str(tmp_path / "dh")})
    config = home / "dagster.yaml"
    assert config.is_symlink()
    assert config.resolve() == (REPO / "platform" / "dagster.yaml").resolve()
    assert dagster_home({"DAGSTER_HOME": str(home)}) == home  # idempotent


def test_dagster_home_keeps_a_users_own_settings(tmp_path: Path) -> None:
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    dagster_home({"DAGSTER_HOME": str(tmp_path)})
    assert not (tmp_path / "dagster.yaml").is_symlink()
    assert "telemetry" in (tmp_path / "dagster.yaml").read_text()


def test_stop_process_group_kills_what_ignores_sigint(tmp_path: Path) -> None:
    # a parent that ignores SIGINT and a grandchild that does too
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)'])\n"
        "time.sleep(60)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    time.sleep(1.0)
    family = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    assert len(family) == 2
    started = time.monotonic()
    stop_process_group(process, grace_s=1.0)
    assert time.monotonic() - started < 10
    time.sleep(0.5)
    assert not [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
