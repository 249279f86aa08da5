"""Stopping a child that runs in a process group of its own (a broker, an S3 server, `dg dev`,
`tidelake dev` under a benchmark): the one stop for every group tidelake starts."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

from tidelake.streaming.polling import poll_until

_GONE_POLL_S = 0.1


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send sig to a process group; one that is gone already is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_group(
    process: subprocess.Popen[bytes],
    grace_s: float,
    *,
    stop_signal: signal.Signals = signal.SIGTERM,
    leader_only: bool = False,
) -> None:
    """stop_signal to the process's group (with leader_only, to the process alone while it runs:
    one that stops its own children in order), then SIGKILL to whatever of the group is left
    after grace_s. The grace ends when the whole group has exited, not its leader: a child
    still finishing its shutdown is not killed because its parent went first."""
    if leader_only and process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(stop_signal)
    else:
        signal_group(process.pid, stop_signal)

    def gone() -> bool | None:
        process.poll()  # reaps the leader once it exits: a zombie still counts in its group
        return None if _group_alive(process.pid) else True

    with contextlib.suppress(TimeoutError):
        poll_until(gone, timeout_s=grace_s, interval_s=_GONE_POLL_S, timeout_error=TimeoutError)
    signal_group(process.pid, signal.SIGKILL)
    process.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
