"""Load test of the gRPC ingest service on loopback: unary and streaming.

Starts `tidelake serve` as its own process against a local Kafka broker (or
KAFKA_BOOTSTRAP_SERVERS), then, from this process:
- unary: keeps --concurrency trackCall RPCs in flight for --duration seconds;
- streaming: sends --stream-events events over one trackCalls stream, in --batch-size batches.
Every OK means Kafka acknowledged the event (acks=all). Prints requests per second and latency
percentiles (unary: call to answer; streaming: batch sent to its result received).

    python tests/bench/ingest_load.py --duration 20 --concurrency 32 --stream-events 100000
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import click
import grpc
import numpy as np
from common import kafka, wait_for, write_figures
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tidelake.protos import service_pb2, service_pb2_grpc
from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.flows import CALL_EVENTS
from tidelake.streaming.kafka_admin import ensure_topic


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


def unary_load(stub, duration_s: float, concurrency: int, first: int) -> dict:
    latencies: list[float] = []
    failures: list[str] = []
    slots = threading.Semaphore(concurrency)
    lock = threading.Lock()

    def finished(future, started: float) -> None:
        elapsed = time.perf_counter() - started
        with lock:
            if future.exception() is None:
                latencies.append(elapsed)
            else:
                failures.append(str(future.exception().code()))
        slots.release()

    started = time.perf_counter()
    n = first
    while time.perf_counter() - started < duration_s:
        slots.acquire()
        t0 = time.perf_counter()
        future = stub.trackCall.future(_event(n, _now_ms()), timeout=30)
        future.add_done_callback(lambda f, t0=t0: finished(f, t0))
        n += 1
    for _ in range(concurrency):
        slots.acquire()
    elapsed = time.perf_counter() - started
    return {
        "requests": len(latencies),
        "failures": len(failures),
        "seconds": round(elapsed, 2),
        "requests_per_s": round(len(latencies) / elapsed, 1),
        "concurrency": concurrency,
        **_percentiles(latencies),
    }


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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@click.command()
@click.option("--duration", type=float, default=20.0, show_default=True, help="Unary seconds.")
@click.option("--concurrency", type=int, default=32, show_default=True)
@click.option("--stream-events", type=int, default=200_000, show_default=True)
@click.option("--batch-size", type=int, default=500, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), help="Write the figures as JSON here.")
def main(
    duration: float, concurrency: int, stream_events: int, batch_size: int, out: Path | None
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
            unary = unary_load(stub, duration, concurrency, first=0)
            streaming = stream_load(stub, stream_events, batch_size, first=10_000_000)
            paced_rate = round(streaming["events_per_s"] / 2, -3) or 1000
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
    print(
        f"streaming  {streaming['events_per_s']:>10,.0f} ev/s    {streaming['acknowledged']:,} "
        f"OK of {stream_events:,} in batches of {batch_size}; batch sent-to-result "
        f"p50 {streaming['p50_ms']} ms, p99 {streaming['p99_ms']} ms"
    )
    print(
        f"streaming  {paced['events_per_s']:>10,.0f} ev/s    paced at {paced_rate:,.0f} ev/s for "
        f"10 s; batch sent-to-result p50 {paced['p50_ms']} ms, p99 {paced['p99_ms']} ms"
    )
    print(f"server exit code {server.returncode} (0: flushed, nothing left unacknowledged)")
    write_figures(
        out,
        {"unary": unary, "streaming": streaming, "paced": paced, "exit_code": server.returncode},
    )


if __name__ == "__main__":
    main()
