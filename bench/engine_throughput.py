"""Ingest throughput: `tidelake stream --available-now` against the single-process floor.

Both read the same N CallEvents from one topic. The floor is the tightest honest pipeline in
one Python process: confluent-kafka (tuned as in shared/notes/engine-measurements.md) ->
protobuf decode -> Arrow -> zstd Parquet, no Spark, no Delta, no deduplication (it writes the
producer's repeats too). Prints events/s of both, the
steady-state ratio (tidelake without its start-up / floor), start-up (process start to first
committed Delta version), whole-command time and the peak summed RSS of the process tree.

    python bench/engine_throughput.py --events 1000000
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from operator import attrgetter
from pathlib import Path

import click
import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
from common import TreeSampler, commits, kafka, write_figures
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tidelake.platform.dev.produce import TOO_LATE, produce_demo_events
from tidelake.platform.local.kafka_broker import LocalKafkaBroker
from tidelake.platform.local.s3_server import LocalS3Server
from tidelake.platform.local.spark_cluster import LocalSparkCluster
from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.calls.anomaly.detector import ALERTS_TOPIC
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.kafka.acls import role_grants
from tidelake.streaming.kafka.admin import ensure_topic
from tidelake.streaming.schemas.framing import frame_prefix
from tidelake.streaming.settings import kafka_client_env

_STATES = pa.array(CallEvent.CallState.keys())
_REGIONS = pa.array(CallEvent.Region.keys())
_FIELDS = attrgetter("call_sid", "account_sid", "duration", "call_state", "region", "event_time")


def floor_ingest(
    conf: dict, topic: str, partitions: int, out: Path, chunk: int
) -> tuple[int, float]:
    """consume -> decode -> Parquet in one process; returns (rows written, seconds)."""
    started = time.perf_counter()
    consumer = Consumer(
        {
            **conf,
            "group.id": "tidelake-bench-floor",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": 10,
            "fetch.wait.max.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    done: set[int] = set()
    buffer: list[bytes] = []
    rows = files = 0
    while len(done) < partitions:
        for m in consumer.consume(num_messages=50_000, timeout=1.0):
            if m.error() is None:
                buffer.append(m.value())
            elif m.error().code() == KafkaError._PARTITION_EOF:
                done.add(m.partition())
        if len(buffer) >= chunk or (len(done) == partitions and buffer):
            rows += _write_floor_file(buffer, out / f"part-{files:05d}.zstd.parquet")
            files += 1
            buffer = []
    consumer.close()
    return rows, time.perf_counter() - started


def _write_floor_file(values: list[bytes], path: Path) -> int:
    parse = CallEvent.FromString
    decoded = []
    for v in values:
        try:
            decoded.append(_FIELDS(parse(v)))
        except Exception:  # poison: skipped, as the engine quarantines it
            continue
    sid, account, duration, state, region, event_ms = zip(*decoded, strict=True)
    ms = np.fromiter(event_ms, dtype=np.int64, count=len(decoded))
    table = pa.table(
        {
            "call_sid": pa.array(sid, pa.string()),
            "account_sid": pa.array(account, pa.string()),
            "duration": pa.array(duration, pa.int64()),
            "call_state": _STATES.take(pa.array(state, pa.int32())),
            "region": _REGIONS.take(pa.array(region, pa.int32())),
            "event_time": pa.array(ms * 1000, pa.timestamp("us", tz="UTC")),
            "date": pa.array((ms // 86_400_000).astype(np.int32), pa.date32()),
        }
    )
    pq.write_table(table, path, compression="zstd")
    return table.num_rows


# the stream as `tidelake stream --available-now` runs it, on another topic or without the
# flow's dedup
_STREAM_FLOW = """
import dataclasses, sys
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.stream.runner import run_flow_stream
from tidelake.streaming.settings import kafka_client_config, load_engine_settings
topic, dedup = sys.argv[1], sys.argv[2] == "dedup"
key = CALL_EVENTS.dedup_key if dedup else None
flow = dataclasses.replace(CALL_EVENTS, topic=topic, dedup_key=key)
run_flow_stream(flow, load_engine_settings(), kafka_client_config(), available_now=True)
"""


def copy_framed(conf: dict, source: str, target: str, partitions: int, schema_id: int) -> int:
    """Every record of source into target, same partition, key and timestamp, its value in
    Confluent's wire format (magic byte, schema_id, message index [0]); returns the count."""
    ensure_topic(conf, target, partitions)
    prefix = frame_prefix(schema_id)
    consumer = Consumer(
        {**conf, "group.id": f"bench-copy-{time.time_ns()}", "enable.auto.commit": False}
    )
    ends = {}
    for p in range(partitions):
        ends[p] = consumer.get_watermark_offsets(TopicPartition(source, p), timeout=10)[1]
    consumer.assign([TopicPartition(source, p, 0) for p in range(partitions)])
    # the demo producer's batching and compression (platform/dev/produce.py)
    batching = {"linger.ms": 5, "batch.size": 1_000_000, "compression.type": "lz4"}
    producer = Producer({**conf, **batching})
    copied, done = 0, {p for p, end in ends.items() if end == 0}
    while len(done) < partitions:
        for message in consumer.consume(10_000, timeout=1.0):
            if message.error():
                continue
            producer.produce(
                target,
                prefix + message.value(),
                message.key(),
                partition=message.partition(),
                timestamp=message.timestamp()[1],
            )
            producer.poll(0)
            copied += 1
            if message.offset() + 1 >= ends[message.partition()]:
                done.add(message.partition())
    consumer.close()
    producer.flush(60)
    return copied


def tidelake_ingest(
    conf: dict,
    work: Path,
    max_offsets: int,
    dedup: bool = True,
    master: str | None = None,
    s3: LocalS3Server | None = None,
    topic: str | None = None,
) -> dict:
    """One `tidelake stream --available-now` of the topic into a new lake and checkpoint: under
    `work`, or with s3 on that S3 server (its CPU is counted apart: it is not in our tree)."""
    lake = s3.uri(work.name, "lake") if s3 else str(work / "lake")
    checkpoints = s3.uri(work.name, "checkpoints") if s3 else str(work / "checkpoints")
    env = {
        **os.environ,
        **({"TIDELAKE_SPARK_MASTER": master} if master else {}),
        **(s3.env() if s3 else {}),
        **kafka_client_env(conf),
        "TIDELAKE_LAKE": lake,
        "TIDELAKE_CHECKPOINTS": checkpoints,
        "TIDELAKE_LOG_LEVEL": "WARNING",
        "TIDELAKE_MAX_OFFSETS_PER_TRIGGER": str(max_offsets),
    }
    cli = ["-m", "tidelake.platform.cli", "stream", "call_events", "--available-now"]
    script = ["-c", _STREAM_FLOW, topic or CALL_EVENTS.topic, "dedup" if dedup else "no-dedup"]
    cmd = [sys.executable, *(cli if dedup and topic is None else script)]
    server = psutil.Process(s3.pid) if s3 and s3.pid else None
    server_cpu = sum(server.cpu_times()[:2]) if server else 0.0
    started_ms = time.time() * 1000
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    with TreeSampler(proc.pid) as sampler:
        _, stderr = proc.communicate()
    whole_s = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"tidelake failed ({proc.returncode}):\n{stderr[-4000:]}")
    log = [c for c in commits(f"{lake}/call_events") if c.rows]
    first, last = log[0], log[-1]
    # steady: after the first full batch (a start commits a small batch first, then its first
    # full one, still cold: neither is steady)
    full = next(i for i, c in enumerate(log) if c.rows > max_offsets // 2)
    steady_rows = sum(c.rows for c in log[full + 1 :])
    steady_s = (last.timestamp_ms - log[full].timestamp_ms) / 1000
    return {
        "rows": sum(c.rows for c in log),
        "batches": len(log),
        "whole_command_s": whole_s,
        "startup_s": (first.timestamp_ms - started_ms) / 1000,
        "first_batch_rows": first.rows,
        "steady_rows": steady_rows,
        "steady_s": steady_s,
        "steady_events_per_s": steady_rows / steady_s if steady_s > 0 else float("nan"),
        "overall_events_per_s": sum(c.rows for c in log) / whole_s,
        "peak_rss_gb": sampler.peak_rss / 1e9,
        "peak_pss_gb": sampler.peak_pss / 1e9,
        "cpu_s": sampler.total_cpu_s,
        "cpu_s_by_process": sampler.cpu_by_kind(),
        "peak_rss_gb_by_process": {k: v / 1e9 for k, v in sampler.peak_rss_by_kind.items()},
        "s3_server_cpu_s": sum(server.cpu_times()[:2]) - server_cpu if server else 0.0,
    }


def on_cluster(conf: dict, work: Path, max_offsets: int, dedup: bool) -> dict:
    """tidelake_ingest on a Spark standalone cluster started for it; the CPU of its workers and
    of the executors they ran is counted too (the driver's tree does not hold them)."""
    work.mkdir()
    with LocalSparkCluster(workers=2, cores=1, folder=work / "spark") as cluster:
        workers = [psutil.Process(pid) for pid in cluster.worker_pids]
        before = sum(_with_children(w) for w in workers)
        figures = tidelake_ingest(conf, work, max_offsets, dedup, master=cluster.master_url)
        figures["cluster_cpu_s"] = sum(_with_children(w) for w in workers) - before
        for worker in workers:  # executors still alive at the end (not reaped yet)
            figures["cluster_cpu_s"] += sum(
                sum(c.cpu_times()[:2]) for c in worker.children(recursive=True)
            )
    return figures


def _with_children(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def _rounded(figures: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in sorted(figures.items()))


@click.command()
@click.option("--events", default=1_000_000, show_default=True, help="Events to ingest.")
@click.option("--max-offsets-per-trigger", default=250_000, show_default=True)
@click.option("--floor-chunk", default=250_000, show_default=True, help="Rows per floor file.")
@click.option("--skip-floor", is_flag=True, help="Only run tidelake.")
@click.option(
    "--dedup/--no-dedup", default=True, show_default=True, help="CallEvent's dedup of retries."
)
@click.option(
    "--also-on-cluster",
    is_flag=True,
    help="Ingest the same events again on a Spark standalone cluster of 2 workers x 1 core.",
)
@click.option(
    "--also-on-s3",
    is_flag=True,
    help="Ingest the same events again with the lake and checkpoints on a local S3 server.",
)
@click.option(
    "--also-framed",
    is_flag=True,
    help="Ingest the same events again with every value in Confluent's wire format.",
)
@click.option(
    "--also-secured",
    is_flag=True,
    help="Ingest the same events again from a secured broker (SASL_SSL, SCRAM-SHA-512, ACLs), "
    "as the stream's own user.",
)
@click.option("--out", type=click.Path(path_type=Path), help="Also write the figures as JSON.")
def main(
    events: int,
    max_offsets_per_trigger: int,
    floor_chunk: int,
    skip_floor: bool,
    dedup: bool,
    also_on_cluster: bool,
    also_on_s3: bool,
    also_framed: bool,
    also_secured: bool,
    out: Path | None,
):
    """Ingest N events with tidelake --available-now and with the one-process floor; compare."""
    with kafka() as conf, tempfile.TemporaryDirectory(prefix="tidelake-bench-") as tmp:
        work = Path(tmp)
        ensure_topic(conf, CALL_EVENTS.topic, CALL_EVENTS.topic_partitions)
        report = produce_demo_events(
            CALL_EVENTS,
            conf,
            count=events,
            malformed_share=0.0,
            late_share=0.05,
            seed=1,
            progress=sys.stderr.isatty(),
        )
        click.echo(
            f"produced {report.produced:,} ({report.good:,} good) in {report.elapsed_s:.1f}s"
        )
        result: dict = {"events": report.produced, "good": report.good}
        if not skip_floor:
            (work / "floor").mkdir()
            rows, seconds = floor_ingest(
                conf, CALL_EVENTS.topic, CALL_EVENTS.topic_partitions, work / "floor", floor_chunk
            )
            # the floor keeps every decodable record: the producer's repeats too (it does
            # not deduplicate), and events whose date had closed (run between 02:00 and 03:00
            # UTC, a few of the late ones), which tidelake drops and quarantines
            too_late = report.malformed_kinds.get(TOO_LATE, 0)
            assert rows == report.good + report.duplicates + too_late, (rows, report)
            result["floor_events_per_s"] = rows / seconds
            result["floor_s"] = seconds
        result["dedup"] = dedup
        result["tidelake"] = t = tidelake_ingest(conf, work, max_offsets_per_trigger, dedup)
        assert t["rows"] == report.good, (t["rows"], report.good)
        if also_framed:
            framed_topic = f"{CALL_EVENTS.topic}-framed"
            copied = copy_framed(
                conf, CALL_EVENTS.topic, framed_topic, CALL_EVENTS.topic_partitions, 1
            )
            assert copied == report.produced, (copied, report.produced)
            (work / "framed").mkdir()
            result["framed"] = tidelake_ingest(
                conf, work / "framed", max_offsets_per_trigger, dedup, topic=framed_topic
            )
            assert result["framed"]["rows"] == report.good
        if also_secured:
            with LocalKafkaBroker(secured=True) as secured:
                admin = secured.client_config()
                ensure_topic(admin, CALL_EVENTS.topic, CALL_EVENTS.topic_partitions)
                again = produce_demo_events(
                    CALL_EVENTS,
                    admin,
                    count=events,
                    malformed_share=0.0,
                    late_share=0.05,
                    seed=1,
                    progress=False,
                )
                assert again.good == report.good
                secured.grant(role_grants([CALL_EVENTS.topic], ALERTS_TOPIC))
                (work / "secured").mkdir()
                result["secured"] = tidelake_ingest(
                    secured.client_config("stream"),
                    work / "secured",
                    max_offsets_per_trigger,
                    dedup,
                )
            assert result["secured"]["rows"] == report.good
        if also_on_cluster:
            result["cluster"] = on_cluster(conf, work / "cluster", max_offsets_per_trigger, dedup)
            assert result["cluster"]["rows"] == report.good
        if also_on_s3:
            with LocalS3Server() as s3:
                os.environ.update(s3.env())  # this process reads the lake's log too
                result["s3"] = tidelake_ingest(
                    conf, work / "on-s3", max_offsets_per_trigger, dedup, s3=s3
                )
            assert result["s3"]["rows"] == report.good

    lines = [
        ("tidelake whole command", f"{t['whole_command_s']:.1f} s", f"{t['batches']} batches"),
        ("tidelake start-up", f"{t['startup_s']:.1f} s", "process start -> 1st commit; <= 8"),
        (
            "tidelake steady state",
            f"{t['steady_events_per_s']:,.0f} ev/s",
            f"{t['steady_s']:.1f} s",
        ),
        ("tidelake overall", f"{t['overall_events_per_s']:,.0f} ev/s", "incl. start-up"),
        ("tidelake peak memory", f"{t['peak_pss_gb']:.2f} GB", "summed PSS; target <= 2.5"),
        ("  (summed RSS)", f"{t['peak_rss_gb']:.2f} GB", "counts shared pages per process"),
        ("tidelake CPU", f"{t['cpu_s']:.1f} s", f"{t['cpu_s'] / t['rows'] * 1e6:.1f} us/event"),
    ]
    if not skip_floor:
        ratio = result["steady_ratio"] = t["steady_events_per_s"] / result["floor_events_per_s"]
        lines.append(("floor", f"{result['floor_events_per_s']:,.0f} ev/s", "1 process"))
        lines.append(("ratio steady / floor", f"{ratio:.2f}", "target >= 1.0 (1.3 without dedup)"))
    for name, value, note in lines:
        click.echo(f"{name:<24}{value:>16}   {note}")
    click.echo(f"CPU s by process:   {_rounded(t['cpu_s_by_process'])}")
    click.echo(f"peak GB by process: {_rounded(t['peak_rss_gb_by_process'])}")
    if also_on_s3:
        s = result["s3"]
        click.echo(
            f"lake and checkpoints on S3 (SeaweedFS on this machine) next to the local disk: "
            f"steady {s['steady_events_per_s']:,.0f} vs {t['steady_events_per_s']:,.0f} ev/s "
            f"({s['steady_events_per_s'] / t['steady_events_per_s']:.2f}x), start-up "
            f"{s['startup_s']:.1f} vs {t['startup_s']:.1f} s, whole command "
            f"{s['whole_command_s']:.1f} vs {t['whole_command_s']:.1f} s, CPU "
            f"{s['cpu_s']:.1f} s + S3 server {s['s3_server_cpu_s']:.1f} s vs {t['cpu_s']:.1f} s"
        )
    if also_framed:
        click.echo(
            "every value framed (Confluent wire format) next to bare: "
            + _cost_next_to(result["framed"], t, "framing", 0.05)
        )
    if also_secured:
        click.echo(
            "from a secured broker (SASL_SSL, SCRAM-SHA-512, TLS) next to plaintext: "
            + _cost_next_to(result["secured"], t, "TLS", 0.25)
        )
    if also_on_cluster:
        c = result["cluster"]
        click.echo(
            f"on the cluster (2 workers x 1 core) next to local[2]: steady "
            f"{c['steady_events_per_s']:,.0f} vs {t['steady_events_per_s']:,.0f} ev/s "
            f"({c['steady_events_per_s'] / t['steady_events_per_s']:.2f}x), start-up "
            f"{c['startup_s']:.1f} vs {t['startup_s']:.1f} s, whole command "
            f"{c['whole_command_s']:.1f} vs {t['whole_command_s']:.1f} s, CPU "
            f"{c['cpu_s'] + c['cluster_cpu_s']:.1f} s (driver {c['cpu_s']:.1f}, workers and "
            f"executors {c['cluster_cpu_s']:.1f}) vs {t['cpu_s']:.1f} s"
        )
    write_figures(out, result)


def _cost_next_to(run: dict, base: dict, what: str, target: float) -> str:
    """A variant's run next to the base run of the same benchmark: steady rate, what it costs
    against its target, CPU per event and start-up."""
    cost = 1 - run["steady_events_per_s"] / base["steady_events_per_s"]
    return (
        f"steady {run['steady_events_per_s']:,.0f} vs {base['steady_events_per_s']:,.0f} ev/s "
        f"({what} costs {cost:.1%}; target < {target:.0%}), CPU "
        f"{run['cpu_s'] / run['rows'] * 1e6:.1f} vs {base['cpu_s'] / base['rows'] * 1e6:.1f} "
        f"us/event, start-up {run['startup_s']:.1f} vs {base['startup_s']:.1f} s"
    )


if __name__ == "__main__":
    main()
