"""Load test of the gRPC ingest service on loopback: unary and streaming.

Starts `tidelake serve` as its own process against a local Kafka broker (or
KAFKA_BOOTSTRAP_SERVERS), then:
- unary: keeps --concurrency trackCall RPCs in flight for --duration seconds, from a grpc-java
  client (java/UnaryLoad.java: a Python client would be the bottleneck);
- streaming, from this process: --stream-events events over one trackCalls stream, in
  --batch-size batches; then 100 streams at once, and one stream paced at half the rate.
Every OK means Kafka acknowledged the event (acks=all). Prints requests per second and latency
percentiles (unary: call to answer; streaming: batch sent to its result received).

    python bench/ingest_load.py --duration 20 --concurrency 512 --stream-events 200000
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
import grpc
import numpy as np
import psutil
import uvloop
from common import TreeSampler, kafka, wait_for, write_figures
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tidelake.protos import call_pb2, service_pb2, service_pb2_grpc
from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.kafka.admin import ensure_topic
from tidelake.streaming.spark.jars import ingest_classpath, java_executable

UNARY_LOAD = Path(__file__).with_name("java") / "UnaryLoad.java"


def _event(n: int, event_time_ms: int) -> CallEvent:
    return CallEvent(
        call_sid=f"CA{n:032x}",
        account_sid=f"AC{n % 97:032x}",
        duration=n % 600,
        call_state=CallEvent.completed if n % 10 else CallEvent.failed,
        region=(CallEvent.us1, CallEvent.us2, CallEvent.de1)[n % 3],
        event_time=event_time_ms,
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _percentiles(seconds: list[float] | np.ndarray) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000
    return {f"p{p}_ms": round(float(np.percentile(ms, p)), 2) for p in (50, 90, 99)} | {
        "max_ms": round(float(ms.max()), 2)
    }


def unary_load(
    port: int, duration_s: float, concurrency: int, warm_up_s: float, cpu: CpuSplit
) -> dict:
    """trackCall from grpc-java (java/UnaryLoad.java, run from source on the service's own
    classpath) with `concurrency` calls in flight: Python's gRPC client cost ~160 µs of CPU a
    call, so on two cores it, not the service, would be what is measured. `cpu` brackets the
    measured run only (after the warm-up); the client counts its own CPU."""
    descriptors = Path(call_pb2.__file__).with_name("call.binpb")
    command = [java_executable(), "-cp", ingest_classpath(), str(UNARY_LOAD), str(port)]
    command += [str(concurrency), str(duration_s), "0", str(descriptors), str(warm_up_s)]
    client = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert client.stdout is not None
    lines = iter(client.stdout)
    if next(lines, "").strip() != "measuring":
        raise SystemExit(f"UnaryLoad failed (exit code {client.wait()})")
    with cpu:
        figures = json.loads(next(lines))
    client.wait()
    cpu.cpu_s["client"] = figures.pop("client_cpu_s")
    return figures | cpu.per_item_us(figures["requests"])


def stream_load(stub, events: int, batch_size: int, first: int, rate: float | None = None) -> dict:
    batches = -(-events // batch_size)
    sent = np.zeros(batches)
    received = np.zeros(batches)
    accepted = refused = 0
    now = _now_ms()

    def requests():
        for b in range(batches):
            if rate is not None:  # pace: batch b is due at b * batch_size / rate
                ahead = started + b * batch_size / rate - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
            start = first + b * batch_size
            count = min(batch_size, events - b * batch_size)
            batch = service_pb2.CallEventBatch(
                batch=b, events=[_event(n, now) for n in range(start, start + count)]
            )
            sent[b] = time.perf_counter()
            yield batch

    started = time.perf_counter()
    for result in stub.trackCalls(requests(), timeout=600):
        received[result.batch] = time.perf_counter()
        accepted += result.accepted
        refused += len(result.refused)
    elapsed = time.perf_counter() - started
    return {
        "events": events,
        "batch_size": batch_size,
        "offered_events_per_s": rate,
        "acknowledged": accepted,
        "refused": refused,
        "seconds": round(elapsed, 2),
        "events_per_s": round(accepted / elapsed, 1),
        **_percentiles(received - sent),
    }


class CpuSplit:
    """CPU seconds of the service, the broker and this client over a phase: what bounds the
    rate on a 2-core machine where all three run."""

    def __init__(self, server_pid: int, broker_port: int):
        service = psutil.Process(server_pid)
        self._procs = {"service": service, "client": psutil.Process()}
        # the service is the launcher and its JVM: counted as one
        self._children = service.children(recursive=True)
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port == broker_port and conn.pid:
                self._procs["broker"] = psutil.Process(conn.pid)
        self._start: dict[str, float] = {}
        self._wall = 0.0

    def _cpu(self) -> dict[str, float]:
        cpu = {name: sum(p.cpu_times()[:2]) for name, p in self._procs.items()}
        cpu["service"] += sum(sum(p.cpu_times()[:2]) for p in self._children)
        return cpu

    def __enter__(self) -> CpuSplit:
        self._start = self._cpu()
        self._wall = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self._cpu()
        self.seconds = time.perf_counter() - self._wall
        self.cpu_s = {name: end[name] - self._start[name] for name in end}

    def per_item_us(self, items: int) -> dict[str, float]:
        return {f"{name}_cpu_us": round(s / items * 1e6, 1) for name, s in self.cpu_s.items()}

    def line(self, items: int, unit: str) -> str:
        used = sum(self.cpu_s.values()) / self.seconds
        split = ", ".join(
            f"{k.removesuffix('_cpu_us')} {v}" for k, v in self.per_item_us(items).items()
        )
        return f"           CPU µs per {unit}: {split}; {used:.2f} of 2 cores busy"


def many_streams(address: str, streams: int, events_each: int, batch_size: int, first: int) -> dict:
    """`streams` trackCalls streams at once from one asyncio client, each sending its events as
    fast as its results come back; batches are serialized before the clock starts."""
    now = _now_ms()
    per_stream = [
        [
            service_pb2.CallEventBatch(
                batch=b,
                events=[_event(first + s * events_each + n, now) for n in range(b, b + batch_size)],
            ).SerializeToString()
            for b in range(0, events_each, batch_size)
        ]
        for s in range(streams)
    ]

    async def run() -> tuple[int, float]:
        channel = grpc.aio.insecure_channel(address)
        track = channel.stream_stream(
            "/tidelake.v1.CallEventService/trackCalls",
            response_deserializer=service_pb2.TrackBatchResult.FromString,
        )

        async def one(batches: list[bytes]) -> int:
            async def requests() -> Any:
                for batch in batches:
                    yield batch

            return sum([r.accepted async for r in track(requests(), timeout=600)])

        started = time.perf_counter()
        accepted = sum(await asyncio.gather(*(one(b) for b in per_stream)))
        elapsed = time.perf_counter() - started
        await channel.close()
        return accepted, elapsed

    accepted, elapsed = uvloop.run(run())
    return {
        "streams": streams,
        "acknowledged": accepted,
        "seconds": round(elapsed, 2),
        "events_per_s": round(accepted / elapsed, 1),
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@click.command()
@click.option("--duration", type=float, default=20.0, show_default=True, help="Unary seconds.")
@click.option("--concurrency", type=int, default=512, show_default=True, help="Unary in flight.")
@click.option("--stream-events", type=int, default=200_000, show_default=True)
@click.option("--batch-size", type=int, default=500, show_default=True)
@click.option(
    "--warm-up",
    type=float,
    default=15.0,
    show_default=True,
    help="Unary seconds before the measured ones: the service and client JVMs compile first.",
)
@click.option("--out", type=click.Path(path_type=Path), help="Write the figures as JSON here.")
def main(
    duration: float,
    concurrency: int,
    stream_events: int,
    batch_size: int,
    warm_up: float,
    out: Path | None,
) -> None:
    with kafka() as conf, tempfile.TemporaryDirectory() as tmp:
        ensure_topic(conf, CALL_EVENTS.topic, CALL_EVENTS.topic_partitions)
        port = _free_port()
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": conf["bootstrap.servers"],
            "TIDELAKE_LAKE": str(Path(tmp) / "lake"),
            "TIDELAKE_LOG_LEVEL": "WARNING",
        }
        server = subprocess.Popen(
            [sys.executable, "-m", "tidelake.platform.cli", "serve", "--port", str(port)],
            env=env,
            start_new_session=True,
        )
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        try:
            health = health_pb2_grpc.HealthStub(channel)

            def serving() -> bool:
                try:
                    status = health.Check(health_pb2.HealthCheckRequest(), timeout=1).status
                except grpc.RpcError:
                    return False
                return status == health_pb2.HealthCheckResponse.SERVING

            wait_for(serving, 60, "the ingest service", poll_s=0.2)
            stub = service_pb2_grpc.CallEventServiceStub(channel)
            broker_port = int(conf["bootstrap.servers"].split(",")[0].rsplit(":", 1)[1])
            unary_cpu = CpuSplit(server.pid, broker_port)
            unary = unary_load(port, duration, concurrency, warm_up, unary_cpu)
            with CpuSplit(server.pid, broker_port) as stream_cpu:
                streaming = stream_load(stub, stream_events, batch_size, first=10_000_000)
            streaming |= stream_cpu.per_item_us(streaming["acknowledged"])
            paced_rate = round(streaming["events_per_s"] / 2, -3) or 1000
            with TreeSampler(server.pid, interval_s=0.1) as memory:
                rss_before = psutil.Process(server.pid).memory_info().rss
                many = many_streams(f"127.0.0.1:{port}", 100, 2_000, 100, first=30_000_000)
            many |= {"rss_before_mb": rss_before >> 20, "peak_rss_mb": memory.peak_rss >> 20}
            paced = stream_load(
                stub, int(paced_rate * 10), batch_size, first=20_000_000, rate=paced_rate
            )
        finally:
            channel.close()
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    print(
        f"unary      {unary['requests_per_s']:>10,.0f} req/s   {unary['requests']:,} OK, "
        f"{unary['failures']} failed, {concurrency} in flight; latency p50 {unary['p50_ms']} ms, "
        f"p99 {unary['p99_ms']} ms"
    )
    print(unary_cpu.line(unary["requests"], "request"))
    print(
        f"streaming  {streaming['events_per_s']:>10,.0f} ev/s    {streaming['acknowledged']:,} "
        f"OK of {stream_events:,} in batches of {batch_size}; batch sent-to-result "
        f"p50 {streaming['p50_ms']} ms, p99 {streaming['p99_ms']} ms"
    )
    print(stream_cpu.line(streaming["acknowledged"], "event"))
    print(
        f"streaming  {paced['events_per_s']:>10,.0f} ev/s    paced at {paced_rate:,.0f} ev/s for "
        f"10 s; batch sent-to-result p50 {paced['p50_ms']} ms, p99 {paced['p99_ms']} ms"
    )
    print(
        f"100 streams {many['events_per_s']:>10,.0f} ev/s    {many['acknowledged']:,} OK; service "
        f"memory {many['rss_before_mb']} MB before, {many['peak_rss_mb']} MB at most"
    )
    print(f"server exit code {server.returncode} (0: flushed, nothing left unacknowledged)")
    write_figures(
        out,
        {
            "unary": unary,
            "streaming": streaming,
            "many_streams": many,
            "paced": paced,
            "exit_code": server.returncode,
        },
    )


if __name__ == "__main__":
    main()
