"""Waiting for a process to end or to stop, as the tests that stop processes need."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from tidelake.streaming.polling import poll_until


def signal_in_mask(pid: int, mask: str, sig: signal.Signals) -> bool:
    """Whether sig is in one of the process's signal masks in /proc (SigIgn: ignored, SigCgt:
    caught by a handler)."""
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith(f"{mask}:"))
    return bool(int(line.split()[1], 16) & (1 << (sig - 1)))


def gone(pid: int, timeout_s: float = 5.0) -> bool:
    """True once pid has exited, an AssertionError if it has not in timeout_s; an orphan stays
    a zombie until init reaps it, which counts."""

    def exited() -> bool | None:
        try:
            return True if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE else None
        except psutil.NoSuchProcess:
            return True

    return poll_until(
        exited,
        timeout_s=timeout_s,
        interval_s=0.02,
        timeout_error=lambda _: AssertionError(f"process {pid} still runs after {timeout_s:g} s"),
    )


@contextmanager
def paused(pid: int, timeout_s: float = 10.0) -> Iterator[None]:
    """The process stopped (SIGSTOP) for the block, continued (SIGCONT) after it.

    kill() returns before the process stops: the stop spreads from the first of its threads to
    take the signal, and until then the others run on. On a loaded machine that was long enough
    for a paused broker to acknowledge a record (measured here with 6 busy loops on 2 cores:
    1 of 150 records sent after kill() returned was acknowledged). So wait until every thread is
    stopped.
    """
    os.kill(pid, signal.SIGSTOP)
    try:
        poll_until(
            lambda: True if _all_threads_stopped(pid) else None,
            timeout_s=timeout_s,
            interval_s=0.002,
            timeout_error=lambda _: AssertionError(
                f"process {pid} did not stop in {timeout_s:g} s"
            ),
        )
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _all_threads_stopped(pid: int) -> bool:
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
        except FileNotFoundError:  # the thread ended
            continue
    return all(state in ("T", "t") for state in states)


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every process below it at once: a crash of the machine's share of
    the work, whatever sessions its children started."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for process in tree:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            continue
