"""Stop signals: the first one stops the wait it lands in, whatever that wait holds; a second
one ends the process, or is ignored where cleanup must finish.

Python runs a signal handler on the main thread between two bytecodes, so the signal can land
while that thread is inside stop.wait(), holding the event's own lock. A handler that set the
event there waited for itself forever. The program makes that moment certain without CPython's
private parts: its event's set() takes a lock of its own, which the main thread holds while
signal.raise_signal() runs the handler (it returns only once the handler has run). Each scenario
runs in a process of its own, which a hang would leave to the timeout.
"""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
import logging, signal, sys, threading
from tidelake.streaming.stream.stop_signals import graceful_stop_signals

class HeldEvent(threading.Event):
    '''An event whose set() takes a lock, as CPython's takes the one stop.wait() holds.'''

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()

    def set(self):
        with self.lock:
            super().set()

logging.basicConfig(level=logging.INFO, format="%(message)s")
second_signal_exits = sys.argv[1] == "exits"
event = HeldEvent()
with graceful_stop_signals(second_signal_exits=second_signal_exits, stop=event) as stop:
    with event.lock:  # as the main thread holds the lock inside stop.wait()
        signal.raise_signal(signal.SIGTERM)  # the handler runs in here, on this thread
    if not stop.wait(10):
        sys.exit("the first signal did not stop the wait")
    print("stopped", flush=True)
    signal.raise_signal(signal.SIGINT)
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
