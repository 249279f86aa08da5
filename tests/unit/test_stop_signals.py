"""Stop signals: the first one stops the wait it lands in, whatever that wait holds; a second
one ends the process, or is ignored where cleanup must finish.

Python runs a signal handler on the main thread between two bytecodes, so the signal can land
while that thread is inside stop.wait(), holding the event's own lock. A handler that set the
event there waited for itself forever. Holding that lock when the signal comes makes the moment
certain (CPython's Event keeps it as `_cond`); each scenario runs in a process of its own, which
a hang would leave to the timeout.
"""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
import logging, os, signal, sys, time
from tidelake.streaming.stream.stop_signals import graceful_stop_signals

logging.basicConfig(level=logging.INFO, format="%(message)s")
second_signal_exits = sys.argv[1] == "exits"
with graceful_stop_signals(second_signal_exits=second_signal_exits) as stop:
    with stop._cond:  # where the main thread is inside stop.wait()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # the handler runs here, on this thread
    if not stop.wait(10):
        sys.exit("the first signal did not stop the wait")
    print("stopped", flush=True)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)
    print("went on after the second signal", flush=True)
"""


def _run(second: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, second], capture_output=True, text=True, timeout=60
    )


def test_a_signal_that_lands_inside_the_stop_wait_stops_it_and_a_second_one_exits() -> None:
    done = _run("exits")
    assert done.returncode == 128 + 2, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["stopped"]
    assert done.stderr.splitlines()[0] == "received SIGTERM: stopping after the current batch"


def test_a_second_signal_is_ignored_where_cleanup_must_finish() -> None:
    done = _run("ignored")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["stopped", "went on after the second signal"]
