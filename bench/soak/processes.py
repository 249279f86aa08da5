"""Every process of the platform by role (series.ROLES): RSS, CPU, threads; the stream JVM's CPU
by thread group and its own memory figures (jcmd); the run workers of Dagster's runs."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from common import thread_names

from soak.platform import Soak
from soak.series import JVM_MEMORY_SERIES, ROLES, THREAD_GROUPS, thread_group

DETECTOR_JOB = "call_anomaly_detector"
JVM_MEMORY_EVERY_S = 120.0
"""jcmd starts a JVM of its own (~0.5 s of CPU): the stream JVM is asked every 2 minutes."""
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def thread_cpu_s(pid: int) -> dict[int, tuple[str, float]]:
    """Each live thread of a process: its name and CPU seconds so far."""
    out: dict[int, tuple[str, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        ticks = fields.split()
        out[int(tid)] = (name, (int(ticks[11]) + int(ticks[12])) / _CLOCK_TICKS)  # utime, stime
    return out


def _anonymous_mb(pid: int) -> float:
    """A process's anonymous resident memory (heaps, thread stacks): what grows when native
    allocations do, apart from mapped files such as libraries."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Anonymous:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


_HEAP_USED = re.compile(r"heap\s+total \d+K, used (\d+)K")
_METASPACE = re.compile(r"^\s*Metaspace\s+used \d+K, committed (\d+)K", re.MULTILINE)
_CODE_HEAP_USED = re.compile(r"^CodeHeap '[^']+': size=\d+Kb used=(\d+)Kb", re.MULTILINE)


def jvm_memory_mb(pid: int) -> dict[str, float]:
    """The heap's used part, the metaspace's committed part and the code cache's used part of a
    running JVM, from its own JDK's jcmd; empty if it cannot be asked."""
    try:
        jcmd = Path(os.readlink(f"/proc/{pid}/exe")).with_name("jcmd")
    except OSError:
        return {}

    def ask(command: str) -> str:
        done = subprocess.run(
            [str(jcmd), str(pid), command], capture_output=True, text=True, timeout=30
        )
        return done.stdout if done.returncode == 0 else ""

    try:
        heap, code = ask("GC.heap_info"), ask("Compiler.codecache")
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out: dict[str, float] = {}
    if used := _HEAP_USED.search(heap):
        out["jvm_mb_heap_used"] = int(used.group(1)) / 1024
    if meta := _METASPACE.search(heap):
        out["jvm_mb_metaspace"] = int(meta.group(1)) / 1024
    if heaps := _CODE_HEAP_USED.findall(code):
        out["jvm_mb_code_cache"] = sum(int(k) for k in heaps) / 1024
    return out


class ProcessSampler:
    """RSS and CPU of every process of the platform, by role; the stream JVM's CPU by thread
    group too (STREAM_THREADS)."""

    def __init__(self, soak: Soak) -> None:
        self.soak = soak
        self._cpu: dict[int, float] = {}
        self._threads: dict[int, dict[int, tuple[str, float]]] = {}
        self.other_threads: Counter[str] = Counter()
        """CPU seconds of the stream JVM's "other" threads by name, over the run."""
        self.driver_threads: Counter[str] = Counter()
        """The stream's Python driver's threads by name, at the last sample."""
        self._at = time.monotonic()
        self._wall_at = time.time()
        self._jvm_memory: dict[str, float] = {}
        self._jvm_memory_at = 0.0

    def sample(self) -> dict[str, float]:
        workers = live_run_workers(self.soak.dagster_home)
        rss = dict.fromkeys(ROLES, 0.0)
        cpu_s = dict.fromkeys(ROLES, 0.0)
        threads = dict.fromkeys(ROLES, 0.0)
        anon_mb = jvm_anon_mb = 0.0
        driver_threads: Counter[str] = Counter()
        born = dict.fromkeys(ROLES, 0.0)  # the role's youngest process
        cpu_now: dict[int, float] = {}
        threads_now: dict[int, dict[int, tuple[str, float]]] = {}
        by_thread = dict.fromkeys(THREAD_GROUPS, 0.0)
        for proc, role in platform_processes(self.soak, workers):
            try:
                mem = proc.memory_info().rss
                times = proc.cpu_times()
            except psutil.Error:
                continue
            used = times.user + times.system
            cpu_now[proc.pid] = used
            rss[role] += mem / 2**20
            try:
                threads[role] += proc.num_threads()
                if role == "stream-python":
                    anon_mb += _anonymous_mb(proc.pid)
                    driver_threads.update(thread_names(proc.pid))
                created = proc.create_time()
            except psutil.Error:
                continue
            born[role] = max(born[role], created)
            new = created > self._wall_at  # born since the last sample
            cpu_s[role] += used - self._cpu.get(proc.pid, 0.0 if new else used)
            if role == "stream-jvm":
                jvm_anon_mb += _anonymous_mb(proc.pid)
                self._ask_jvm_memory(proc.pid)
                jvm_threads = threads_now[proc.pid] = thread_cpu_s(proc.pid)
                seen = self._threads.get(proc.pid, {} if new else None)
                if seen is None:  # first sight of a JVM older than the sampler: a baseline
                    continue
                # (a thread that ended since the last sample is not counted for that interval)
                for tid, (name, seconds) in jvm_threads.items():
                    spent, group = seconds - seen.get(tid, ("", 0.0))[1], thread_group(name)
                    by_thread[group] += spent
                    if group == "other":
                        self.other_threads[name] += spent
        now = time.monotonic()
        wall, self._at, self._cpu = now - self._at, now, cpu_now
        self._threads = threads_now
        self.driver_threads = driver_threads or self.driver_threads
        self._wall_at = time.time()
        out = {f"rss_mb_{r}": rss[r] for r in ROLES}
        out |= {f"cpu_pct_{r}": 100 * cpu_s[r] / wall for r in ROLES}
        out |= {f"threads_{r}": threads[r] for r in ROLES}
        out["rss_anon_mb_stream-python"] = anon_mb
        out["rss_anon_mb_stream-jvm"] = jvm_anon_mb
        out |= {name: self._jvm_memory.get(name, np.nan) for name in JVM_MEMORY_SERIES}
        out |= {f"stream_jvm_cpu_pct_{g}": 100 * s / wall for g, s in by_thread.items()}
        out |= {f"age_s_{r}": self._wall_at - born[r] for r in ROLES if born[r]}
        out["rss_mb_total"] = sum(rss.values())
        return out

    def _ask_jvm_memory(self, pid: int) -> None:
        """Refresh the stream JVM's own figures when they are older than JVM_MEMORY_EVERY_S
        (a sample between two asks repeats the last answer)."""
        if time.monotonic() - self._jvm_memory_at >= JVM_MEMORY_EVERY_S:
            self._jvm_memory = jvm_memory_mb(pid)
            self._jvm_memory_at = time.monotonic()


def platform_processes(soak: Soak, workers: dict[int, str]) -> Iterator[tuple[psutil.Process, str]]:
    """Each process of the platform with its role (series.ROLES); `workers` are the run
    workers of the runs in progress (live_run_workers)."""
    broker_pid = soak.cluster.broker(1).pid
    if broker_pid is not None:
        yield from _tree(broker_pid, "kafka")
    if soak.producer is not None and soak.producer.pid is not None:
        yield from _tree(soak.producer.pid, "producer")
    try:
        dev = psutil.Process(soak.dev.pid)
    except psutil.Error:
        return
    yield dev, "tidelake-dev"
    seen = {dev.pid}
    for proc in dev.children(recursive=True):
        if proc.pid in seen:
            continue
        role = _role(proc, workers, soak.stream_job)
        if role in ("stream", "detector", "other-runs"):
            for member, _ in _tree(proc.pid, role):
                seen.add(member.pid)
                if role == "other-runs":
                    yield member, role
                else:
                    yield member, f"{role}-{'jvm' if _is_java(member) else 'python'}"
        elif role is not None:
            seen.add(proc.pid)
            yield proc, role


def _tree(pid: int, role: str) -> Iterator[tuple[psutil.Process, str]]:
    try:
        root = psutil.Process(pid)
        members = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for proc in members:
        yield proc, role


def _is_java(proc: psutil.Process) -> bool:
    try:
        return proc.name() == "java"
    except psutil.Error:
        return False


def _role(proc: psutil.Process, workers: dict[int, str], stream_job: str) -> str | None:
    if proc.pid in workers:
        job = workers[proc.pid]
        return {stream_job: "stream", DETECTOR_JOB: "detector"}.get(job, "other-runs")
    try:
        cmd = " ".join(proc.cmdline())
    except psutil.Error:
        return None
    if "dagster-daemon" in cmd or "dagster._daemon" in cmd:
        return "dagster-daemon"
    if "dagster-webserver" in cmd or "dagster_webserver" in cmd:
        return "dagster-webserver"
    if "api grpc" in cmd or "code-server" in cmd:
        return "dagster-code-server"
    if "java" in cmd and "ingest" in cmd.lower():
        return "ingest-service"
    if "tidelake.platform.cli serve" in cmd:
        return "ingest-service"
    return "dagster-dev" if "dagster" in cmd or " dg " in cmd or cmd.endswith(" dev") else None


_WORKER_LINE = re.compile(r"stream worker pid (\d+)")
_workers: dict[str, tuple[int, str] | None] = {}


def live_run_workers(dagster_home: Path) -> dict[int, str]:
    """pid -> job name of the run workers of the runs in progress: each always-on run logs
    "stream worker pid N" when it starts (assets/stream/always_on.py)."""
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(dagster_home)
    out: dict[int, str] = {}
    try:
        with dg.DagsterInstance.get() as instance:
            runs = instance.get_runs(
                dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING])
            )
            for run in runs:
                if _workers.get(run.run_id) is None:
                    _workers[run.run_id] = _worker(instance, run.run_id, run.job_name)
                found = _workers[run.run_id]
                if found is not None:
                    out[found[0]] = found[1]
    except Exception:  # the instance is being written; next sample
        pass
    return out


def _worker(instance: Any, run_id: str, job_name: str) -> tuple[int, str] | None:
    for entry in instance.all_logs(run_id):
        match = _WORKER_LINE.search(entry.user_message or "")
        if match:
            return int(match.group(1)), job_name
    return None
