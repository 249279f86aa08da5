"""A PostgreSQL server from Debian's package (postgresql), started by the tests on a loopback
port in a folder of its own: Dagster's instance storage for the distributed tests.

Run as root (CI, these machines), the server runs as the package's `postgres` user: initdb and
postgres refuse to run as root.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from tidelake.platform.local.ports import free_port

_DATABASE = "dagster"


def postgres_bin() -> Path | None:
    """The newest installed server's bin folder (/usr/lib/postgresql/<major>/bin), or None."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parts[-3])
    )
    return found[-1].parent if found else None


class LocalPostgres:
    """initdb, start, restart and stop of one server; `url` is what Dagster's postgres_url
    takes (SQLAlchemy's form, with the driver dagster-postgres installs)."""

    def __init__(self) -> None:
        bin_dir = postgres_bin()
        if bin_dir is None:
            raise RuntimeError(
                "PostgreSQL's server is not installed: apt-get install postgresql (.ci/run does)"
            )
        self.bin = bin_dir
        self.folder = Path(tempfile.mkdtemp(prefix="tidelake-postgres-"))
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        self.port = free_port()
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user is not None:
            owner = pwd.getpwnam(self._user)
            os.chown(self.folder, owner.pw_uid, owner.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://tidelake@127.0.0.1:{self.port}/{_DATABASE}"

    def _run(self, tool: str, *args: str, timeout: float = 60) -> None:
        command = [str(self.bin / tool), *args]
        if self._user is not None:
            command = ["runuser", "-u", self._user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed: {done.stdout}{done.stderr}{self._log_tail()}")

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""

    def start(self) -> None:
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-U", "tidelake", "-A", "trust", "-E", "UTF8")
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")
        with contextlib.suppress(RuntimeError):  # exists after a restart
            self._run(
                "createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "tidelake", _DATABASE
            )

    def new_database(self) -> str:
        """An empty database of its own on this server; its URL."""
        name = f"test_{uuid.uuid4().hex[:12]}"
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "tidelake", name)
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def restart(self, down_s: float = 0.0) -> float:
        """Stop (connections cut, as a failover does), stay down `down_s` seconds, start again;
        the seconds it was unreachable."""
        started = time.monotonic()
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        time.sleep(down_s)
        self.start()
        return time.monotonic() - started

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)


@contextlib.contextmanager
def local_postgres() -> Iterator[LocalPostgres]:
    server = LocalPostgres()
    try:
        server.start()
        yield server
    finally:
        server.stop()
