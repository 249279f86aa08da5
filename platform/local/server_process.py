"""A local server the tests and `tidelake dev` run: one process group, one folder, one log.

The Kafka broker, the S3 server, the schema registry and a Spark cluster's daemons share this
life cycle: start() launches and waits until the server answers (stopping it if it never does),
the folder is kept (data_dir) or temporary, a temporary one goes with stop() (and the process is
killed at once: its data is nobody's), and every server still running when the interpreter
exits is stopped.
"""

from __future__ import annotations

import atexit
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self

from tidelake.platform.local.process_group import signal_group, stop_group
from tidelake.streaming.polling import poll_until

_LOG_TAIL_BYTES = 4000
_live: weakref.WeakSet[LocalServerProcess] = weakref.WeakSet()


class LocalServerProcess:
    """The life cycle above; a server class says how to launch it and when it is ready."""

    temp_prefix: ClassVar[str] = "tidelake-server-"
    log_name: ClassVar[str] = "server.log"
    """The log's path in the server's folder."""

    def __init__(
        self, *, data_dir: Path | None, startup_timeout_s: float, stop_grace_s: float
    ) -> None:
        self._kept_dir = data_dir
        self._startup_timeout_s = startup_timeout_s
        self._stop_grace_s = stop_grace_s
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self.startup_s: float | None = None
        """Seconds from start() to the first answer."""

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def workdir(self) -> Path | None:
        return self._workdir

    @property
    def log_path(self) -> Path | None:
        """The server's log (its own output), or None before its folder exists."""
        return self._workdir / self.log_name if self._workdir is not None else None

    def is_alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Launch the server and return once it answers."""
        started = time.monotonic()
        try:
            self.launch()
            self.wait_until_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started

    def launch(self) -> None:
        raise NotImplementedError

    def wait_until_ready(self) -> None:
        raise NotImplementedError

    def _folder(self) -> Path:
        """The server's folder: the kept one, or a new temporary one."""
        if self._kept_dir is not None:
            self._workdir = self._kept_dir.resolve()
            self._workdir.mkdir(parents=True, exist_ok=True)
        elif self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix=self.temp_prefix))
        return self._workdir

    def _spawn(self, command: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        """Run command in the server's folder, in a process group of its own, into its log."""
        folder = self._folder()
        log_path = folder / self.log_name
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            self._process = subprocess.Popen(
                list(command),
                cwd=folder,
                env=None if env is None else dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _live.add(self)

    def _exited(self) -> int | None:
        """The server's exit code if it ended (during start-up: a failure), else None."""
        assert self._process is not None
        return self._process.poll()

    def _wait_answering(
        self,
        answers: Callable[[], object],
        *,
        what: str,
        where: str,
        interval_s: float,
        not_yet: tuple[type[Exception], ...],
        error: Callable[[str], Exception],
    ) -> None:
        """Call answers() until it returns without a `not_yet` error. The server exiting, or
        the start-up timeout passing, ends the wait with `error`, naming `what` (the server),
        `where` it was asked and the tail of its log."""

        def ready() -> bool:
            if (code := self._exited()) is not None:
                raise error(
                    f"{what} exited with code {code} during start-up; its log ends with:\n"
                    f"{self.log_tail()}"
                )
            answers()
            return True

        poll_until(
            ready,
            timeout_s=self._startup_timeout_s,
            interval_s=interval_s,
            timeout_error=lambda last: error(
                f"{what} did not come up at {where} within {self._startup_timeout_s:g}s "
                f"({last}); its log ends with:\n{self.log_tail()}"
            ),
            not_yet=not_yet,
        )

    def kill(self) -> None:
        """SIGKILL the server (a crash), keeping its folder."""
        process, self._process = self._process, None
        if process is not None:
            signal_group(process.pid, signal.SIGKILL)
            process.wait()

    def stop(self) -> None:
        """Stop the server: SIGTERM, SIGKILL after the grace (at once for a temporary folder,
        which goes with it)."""
        process, self._process = self._process, None
        if process is not None:
            stop_group(process, self._stop_grace_s if self._kept_dir is not None else 0)
        self._cleanup()
        if self._kept_dir is None and self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def _cleanup(self) -> None:
        """What else a stopped server leaves to remove."""

    def log_tail(self) -> str:
        """The end of the server's log, for error messages."""
        path = self.log_path
        if path is None or not path.exists():
            return "(no log)"
        with open(path, "rb") as log:
            log.seek(max(0, path.stat().st_size - _LOG_TAIL_BYTES))
            tail = log.read().decode("utf-8", errors="replace").strip()
        return tail or "(empty log)"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@atexit.register
def _stop_live_servers() -> None:
    for server in list(_live):
        server.stop()
