"""How a long-running process stops: the first SIGTERM or SIGINT asks it to stop at its next
consistent point, a second one ends it at once. Light to import: a command installs it before
it loads Spark or starts a server."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)


@contextmanager
def graceful_stop_signals(
    logger: logging.Logger = log,
    stopping: str = "stopping after the current batch",
    *,
    announce: Callable[[signal.Signals], None] | None = None,
    second_signal_exits: bool = True,
    stop: threading.Event | None = None,
) -> Iterator[threading.Event]:
    """An event set by the first SIGTERM/SIGINT, once that signal is announced (by default
    logged on `logger`: "received SIGTERM: <stopping>"). A second one exits at once, or is
    ignored with second_signal_exits=False (a command whose cleanup must not be cut short).

    The handler takes no lock: Python runs it on the main thread between two bytecodes, and
    Event.set() there waits forever when the signal came while the main thread held that
    event's own lock (inside stop.wait()). It writes the signal's number to a pipe; a thread
    of its own announces it and sets the event.

    The previous handlers come back on exit, so a host process (a Dagster run worker) keeps its
    own interrupt handling outside the stream. `stop` is the event to set (a new one by default):
    a test passes one whose lock it holds when the signal lands.
    """
    stop = threading.Event() if stop is None else stop
    received = False
    read_fd, write_fd = os.pipe()

    def handle(signum: int, _frame: FrameType | None) -> None:
        nonlocal received
        if received or stop.is_set():  # is_set() reads a flag: no lock
            if second_signal_exits:
                raise SystemExit(128 + signum)
            return
        received = True
        os.write(write_fd, bytes([signum]))

    def relay() -> None:
        signum = os.read(read_fd, 1)
        if not signum:  # the block ended without a signal
            return
        sig = signal.Signals(signum[0])
        if announce is None:
            logger.info("received %s: %s", sig.name, stopping)
        else:
            announce(sig)
        stop.set()

    relay_thread = threading.Thread(target=relay, name="stop-signals", daemon=True)
    previous: dict[signal.Signals, Any] = {}
    try:  # off the main thread signal.signal() raises: nothing is left open then
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, handle)
        relay_thread.start()  # a signal before it waits in the pipe
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(write_fd)
        if relay_thread.ident is not None:
            relay_thread.join()
        os.close(read_fd)
