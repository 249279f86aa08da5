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

import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import ClassVar

import pyspark
import requests

from tidelake.platform.local.ports import LOOPBACK, free_ports
from tidelake.platform.local.server_process import LocalServerProcess
from tidelake.streaming.errors import TidelakeError
from tidelake.streaming.spark.jars import java_executable

_SCALA_VERSION = "2.13"


class SparkClusterError(TidelakeError, RuntimeError):
    """The cluster did not come up; the message says which part and where its log is."""


class _NotYet(Exception):
    """The master does not answer, or counts fewer workers than wanted, yet."""


class _SparkDaemon(LocalServerProcess):
    """The master or a worker: one JVM from Spark's launch classes, in its own folder (a
    worker's is its work dir, where its executors' logs go)."""

    log_name: ClassVar[str] = "daemon.log"

    def __init__(
        self, cluster: LocalSparkCluster, name: str, main: str, args: list[str], ready: int
    ) -> None:
        super().__init__(
            data_dir=cluster.folder / name,
            startup_timeout_s=cluster.start_timeout_s,
            stop_grace_s=15,
        )
        self._cluster, self._name, self._main, self._args = cluster, name, main, args
        self._ready = ready
        """Workers the master counts once this daemon is up (0 for the master: it answers)."""

    def launch(self) -> None:
        spark_home = Path(pyspark.__file__).parent
        env = {
            **os.environ,
            "SPARK_HOME": str(spark_home),
            "SPARK_SCALA_VERSION": _SCALA_VERSION,
            "SPARK_LOCAL_IP": LOOPBACK,
        }
        java = [java_executable(), "-Xmx512m", "-cp", str(spark_home / "jars" / "*"), self._main]
        self._spawn([*java, *self._args], env)

    def wait_until_ready(self) -> None:
        def answers() -> None:
            alive = self._cluster.alive_workers()
            if alive is None or alive < self._ready:
                raise _NotYet(f"{alive or 0} of {self._cluster.workers} workers registered")

        self._wait_answering(
            answers,
            what=f"the Spark {self._name}",
            where=self._cluster.master_url,
            interval_s=0.5,
            not_yet=(_NotYet,),
            error=SparkClusterError,
        )


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
        self._own_folder = folder is None
        self.folder = folder or Path(tempfile.mkdtemp(prefix="tidelake-spark-"))
        self.start_timeout_s = start_timeout_s
        self.port = 0
        self.ui_port = 0
        self._daemons: list[_SparkDaemon] = []

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    @property
    def worker_pids(self) -> list[int]:
        """The workers' JVMs (each the parent of the executors it runs)."""
        return [pid for daemon in self._daemons[1:] if (pid := daemon.pid) is not None]

    def __enter__(self) -> LocalSparkCluster:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Launch the master and every worker, then wait until the master counts them all."""
        self.port, self.ui_port = free_ports(2)
        master_args = ["--host", LOOPBACK, "--port", str(self.port)]
        self._daemons = [
            _SparkDaemon(
                self,
                "master",
                "org.apache.spark.deploy.master.Master",
                [*master_args, "--webui-port", str(self.ui_port)],
                ready=0,
            )
        ]
        for n in range(1, self.workers + 1):
            name = f"worker-{n}"
            worker_args = [self.master_url, "--host", LOOPBACK, "--cores", str(self.cores)]
            worker_args += ["--memory", self.worker_memory, "--webui-port", "0"]
            worker_args += ["--work-dir", str(self.folder / name)]
            worker = "org.apache.spark.deploy.worker.Worker"
            self._daemons.append(_SparkDaemon(self, name, worker, worker_args, ready=n))
        try:
            for daemon in self._daemons:
                daemon.launch()
            for daemon in self._daemons:
                daemon.wait_until_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Workers first (they stop their executors), then the master."""
        for daemon in reversed(self._daemons):
            daemon.stop()
        self._daemons.clear()
        if self._own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def kill_worker(self, n: int) -> None:
        """SIGKILL worker n (from 1) and the executors it started, as a lost machine goes."""
        self._daemons[n].kill()

    def alive_workers(self) -> int | None:
        """Workers the master counts as alive (its JSON status page), None if it does not
        answer."""
        try:
            status = requests.get(f"http://{LOOPBACK}:{self.ui_port}/json/", timeout=2).json()
        except (requests.RequestException, ValueError):
            return None
        return int(status.get("aliveworkers", 0))
