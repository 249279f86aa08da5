"""Waiting for a process to end, as the tests that stop processes need."""

from __future__ import annotations

import time

import psutil


def gone(pid: int, timeout_s: float = 5.0) -> bool:
    """True once pid has exited; an orphan stays a zombie until init reaps it, which counts."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False
