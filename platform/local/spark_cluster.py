"""A Spark standalone cluster on this machine, from pyspark's own jars (`tidelake spark-cluster`).

A master and its workers, each in its own JVM, started from Spark's launch classes; executors
run in JVMs of their own, started by the workers. The engine reaches it through
TIDELAKE_SPARK_MASTER=spark://127.0.0.1:<port> alone: the jar cache reaches executors through
spark.jars (served by the driver), and Python workers run spark.pyspark.python (this
virtualenv, which every worker on this machine can run).

pip's pyspark has no launcher build folders: a worker must be told the Scala version
(SPARK_SCALA_VERSION), or every executor it launches fails with "Cannot find any build
directories".
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

import pyspark
import requests

from tidelake.platform.local.kafka_broker import free_port
from tidelake.streaming.errors import TidelakeError
from tidelake.streaming.polling import poll_until
from tidelake.streaming.spark.jars import java_executable

_HOST = "127.0.0.1"
_SCALA_VERSION = "2.13"


class SparkClusterError(TidelakeError, RuntimeError):
    """The cluster did not come up; the message says which part and where its log is."""


class LocalSparkCluster:
    """A master and `workers` workers of `cores` cores each, on loopback ports; stopped (the
    JVMs and their executors) on exit."""

    def __init__(
        self,
        workers: int = 2,
        cores: int = 1,
        worker_memory: str = "2g",
        folder: Path | None = None,
        start_timeout_s: float = 60.0,
    ):
        self.workers = workers
        self.cores = cores
        self.worker_memory = worker_memory
        self._own_folder = (
            tempfile.TemporaryDirectory(prefix="tidelake-spark-") if not folder else None
        )
        self.folder = folder or Path(self._own_folder.name)  # type: ignore[union-attr]
        self.start_timeout_s = start_timeout_s
        self.port = 0
        self.ui_port = 0
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://{_HOST}:{self.port}"

    @property
    def worker_pids(self) -> list[int]:
        """The workers' JVMs (each the parent of the executors it runs)."""
        return [process.pid for process in self._processes[1:]]

    def __enter__(self) -> LocalSparkCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port, self.ui_port = free_port(), free_port()
        self._launch(
            "master",
            "org.apache.spark.deploy.master.Master",
            ["--host", _HOST, "--port", str(self.port), "--webui-port", str(self.ui_port)],
        )
        for n in range(1, self.workers + 1):
            self._launch(
                f"worker-{n}",
                "org.apache.spark.deploy.worker.Worker",
                [
                    self.master_url,
                    "--host",
                    _HOST,
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.worker_memory,
                    "--webui-port",
                    "0",
                    "--work-dir",
                    str(self.folder / f"worker-{n}"),
                ],
            )
        self._wait_for_workers()

    def stop(self) -> None:
        """Workers first (they stop their executors), then the master."""
        for process in reversed(self._processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self._processes):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        self._processes.clear()
        if self._own_folder is not None:
            self._own_folder.cleanup()
            self._own_folder = None

    def kill_worker(self, n: int) -> None:
        """SIGKILL worker n (from 1) and the executors it started, as a lost machine goes."""
        os.killpg(self._processes[n].pid, signal.SIGKILL)
        self._processes[n].wait(timeout=10)

    def alive_workers(self) -> int:
        """Workers the master counts as alive (its JSON status page), 0 if it does not answer."""
        try:
            status = requests.get(f"http://{_HOST}:{self.ui_port}/json/", timeout=2).json()
        except (requests.RequestException, ValueError):
            return 0
        return int(status.get("aliveworkers", 0))

    def _launch(self, name: str, main: str, args: list[str]) -> None:
        spark_home = Path(pyspark.__file__).parent
        env = {
            **os.environ,
            "SPARK_HOME": str(spark_home),
            "SPARK_SCALA_VERSION": _SCALA_VERSION,
            "SPARK_LOCAL_IP": _HOST,
        }
        log = (self.folder / f"{name}.log").open("wb")
        command = [java_executable(), "-Xmx512m", "-cp", str(spark_home / "jars" / "*"), main]
        self._processes.append(
            subprocess.Popen(
                [*command, *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: stop() ends it with its executors
            )
        )

    def _wait_for_workers(self) -> None:
        def registered() -> bool | None:
            for process in self._processes:
                if process.poll() is not None:
                    raise SparkClusterError(
                        f"a Spark cluster JVM exited with {process.returncode}; see the logs in "
                        f"{self.folder}"
                    )
            return True if self.alive_workers() >= self.workers else None

        poll_until(
            registered,
            timeout_s=self.start_timeout_s,
            interval_s=0.5,
            timeout_error=lambda _: SparkClusterError(
                f"{self.alive_workers()} of {self.workers} Spark workers registered with the "
                f"master within {self.start_timeout_s:g} s; see the logs in {self.folder}"
            ),
        )
