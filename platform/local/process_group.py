"""Stopping a local server that runs in a process group of its own (broker, S3 server)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send sig to a process group; one that is gone already is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_group(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the process's group, SIGKILL it after grace_s, then anything left in it."""
    if process.poll() is None:
        signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            signal_group(process.pid, signal.SIGKILL)
            process.wait()
    signal_group(process.pid, signal.SIGKILL)
