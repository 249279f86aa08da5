"""SIGINT for a Spark driver that lives inside a host (a Dagster run), delivered between JVM calls.

PySpark's SparkContext installs a SIGINT handler that calls the JVM from inside the handler. When
the signal lands while the driver waits on the JVM (every Spark action), that call re-enters the
socket it interrupted: py4j prints "reentrant call" and "KeyboardInterrupt while sending command"
tracebacks (Ctrl-C in `tidelake dev` and Terminate in the UI both end a step this way). The
host's own handler is no better there: an exception raised mid-call leaves py4j's connection
waiting for the answer of the abandoned call, and the next call on it blocked until the Spark job
finished (two minutes in a test).

So: outside a JVM call the host's handler runs at once. Inside one, the Spark jobs are cancelled
from another thread (its own py4j connection); the cancelled action's error, when it leaves the
session's `with` block, becomes the host's interrupt, and if the call returned without one the
signal is sent again once it has, to reach the host's handler.

The session is made on a thread of its own: PySpark installs its handler only when a SparkContext
is made on the main thread, and making one takes seconds of JVM calls, long enough for a Ctrl-C to
land there (it did, in CI). The main thread waits with the host's handler in front.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_PY4J_DIR = os.path.dirname(str(__import__("py4j").__file__)) + os.sep
_POLL_S = 0.05


def in_jvm_call(frame: FrameType | None) -> bool:
    """Whether a stack (given by its innermost frame) is inside a py4j call."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(_PY4J_DIR):
            return True
        frame = frame.f_back
    return False


class InterruptBetweenJvmCalls:
    """The SIGINT handler: the host's handler, never inside a JVM call."""

    def __init__(self, host_handler: Any):
        self.spark: SparkSession | None = None
        self._host_handler = host_handler
        self._pending = threading.Event()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if not in_jvm_call(frame):
            self.deliver()
        elif not self._pending.is_set():
            self._pending.set()
            threading.Thread(target=self._cancel_then_resend, name="spark-interrupt").start()

    @property
    def pending(self) -> bool:
        """A signal arrived during a JVM call and has not reached the host's handler yet."""
        return self._pending.is_set()

    def deliver(self) -> None:
        """Run the host's handler now (Dagster's raises its interrupt error)."""
        self._pending.clear()
        if callable(self._host_handler):
            self._host_handler(signal.SIGINT, sys._getframe(1))
        elif self._host_handler in (signal.SIG_DFL, None):
            raise KeyboardInterrupt

    def _cancel_then_resend(self) -> None:
        try:
            if self.spark is not None:
                self.spark.sparkContext.cancelAllJobs()
        except Exception as exc:  # the JVM may be gone already; the signal still goes through
            log.debug("cancelling Spark jobs on SIGINT failed: %s", exc)
        main = threading.main_thread()
        while main.is_alive() and in_jvm_call(sys._current_frames().get(main.ident or 0)):
            time.sleep(_POLL_S)
        time.sleep(_POLL_S)  # the cancelled action's error usually delivers it first
        if main.is_alive() and self._pending.is_set():
            os.kill(os.getpid(), signal.SIGINT)


def created_off_main_thread(create: Callable[[], SparkSession]) -> SparkSession:
    """`create()` run on another thread while this one waits, interruptibly (a signal's handler
    runs here, and what it raises leaves this call; the other thread is left to finish); the
    session is then this thread's active one, as if made here."""
    made: list[SparkSession] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            made.append(create())
        except BaseException as exc:  # handed to the waiting thread
            failed.append(exc)

    worker = threading.Thread(target=run, name="spark-session-create", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(_POLL_S)
    if failed:
        raise failed[0]
    session = made[0]
    # the JVM keeps the active session per thread: the caller's thread is the one that uses it
    session._jvm.SparkSession.setActiveSession(session._jsparkSession)  # type: ignore[union-attr]
    return session


@contextmanager
def host_interrupts(create: Callable[[], SparkSession]) -> Iterator[SparkSession]:
    """A session made by `create`, with the host's SIGINT handler (the one installed when this is
    entered) back in front of PySpark's for the block: delivered between JVM calls, and an error
    of a job cancelled by the signal leaves the block as the host's interrupt.

    Off the main thread neither PySpark nor the host can install a handler: nothing to do."""
    if threading.current_thread() is not threading.main_thread():
        yield create()
        return
    host_handler = signal.getsignal(signal.SIGINT)
    handler = InterruptBetweenJvmCalls(host_handler)
    signal.signal(signal.SIGINT, handler)
    try:
        handler.spark = created_off_main_thread(create)
        yield handler.spark
    except Exception:
        if handler.pending:
            try:
                handler.deliver()
            except BaseException as interrupt:  # the cancelled job's error is its consequence
                raise interrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, host_handler)
