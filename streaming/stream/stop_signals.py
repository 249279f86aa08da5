"""How a long-running process stops: the first SIGTERM or SIGINT asks it to stop at its next
consistent point, a second one ends it at once. Light to import: a command installs it before
it loads Spark or starts a server."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

log = logging.getLogger(__name__)


@contextmanager
def graceful_stop_signals(
    logger: logging.Logger = log, stopping: str = "stopping after the current batch"
) -> Iterator[threading.Event]:
    """An event set by the first SIGTERM/SIGINT (logged on `logger`: "received SIGTERM:
    <stopping>"); a second one exits at once.

    The previous handlers come back on exit, so a host process (a Dagster run worker) keeps its
    own interrupt handling outside the stream.
    """
    stop = threading.Event()

    def handle(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            raise SystemExit(128 + signum)
        logger.info("received %s: %s", signal.Signals(signum).name, stopping)
        stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
