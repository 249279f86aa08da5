"""The engine on a Spark standalone cluster: a master and two 1-core workers, each its own JVM,
executors in JVMs of their own, reached through TIDELAKE_SPARK_MASTER alone."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from demo_days import write_days
from lake_readers import duckdb_query

from tidelake.platform.dev.produce import ProduceReport, produce_demo_events
from tidelake.platform.local.spark_cluster import LocalSparkCluster
from tidelake.streaming.calls.anomaly.store import latest_model
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.kafka.admin import delete_topic, ensure_topic
from tidelake.streaming.settings import EngineSettings

pytestmark = pytest.mark.cluster

ON_THE_CLUSTER = """
import dataclasses, sys
from tidelake.streaming.batch.backfill import backfill_dates
from tidelake.streaming.calls.anomaly.training import train_model
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.stream.runner import run_flow_stream
from tidelake.streaming.spark.session import build_spark_session
from tidelake.streaming.settings import kafka_client_config, load_engine_settings

topic, table, training_lake, training_day = sys.argv[1:5]
flow = dataclasses.replace(CALL_EVENTS, topic=topic)
settings, conf = load_engine_settings(), kafka_client_config()
run_flow_stream(flow, settings, conf, available_now=True)
spark = build_spark_session(settings.spark_master)
print("master", spark.sparkContext.master)
dates = spark.read.format("delta").load(table).select("date").distinct().collect()
days = sorted({str(row.date) for row in dates})
result = backfill_dates(spark, flow, days, settings, conf)
print("backfilled", days, result.rows)
training = settings.model_copy(update={"lake": training_lake})
trained = train_model(spark, CALL_EVENTS, training, training_day)
print("model", trained.info.version, trained.info.metrics["recall"], len(trained.baselines))
"""
"""One driver on the cluster for the module's checks (a driver and its executors start once): the
stream, a backfill of what it wrote, then the anomaly model trained on two days of another lake."""


@dataclass
class ClusterRun:
    cluster: LocalSparkCluster
    report: ProduceReport
    table_uri: str
    training: EngineSettings
    stdout: str


@pytest.fixture(scope="module")
def cluster_run(
    kafka_conf: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterRun]:
    root = tmp_path_factory.mktemp("on-the-cluster")
    flow = dataclasses.replace(CALL_EVENTS, topic=f"tidelake-test-cluster-{uuid.uuid4().hex[:8]}")
    ensure_topic(kafka_conf, flow.topic, flow.topic_partitions)
    report = produce_demo_events(
        flow,
        kafka_conf,
        count=2_000,
        malformed_share=0.0,
        duplicate_share=0.0,
        seed=5,
        progress=False,
    )
    settings = EngineSettings(lake=str(root / "lake"), checkpoints=str(root / "checkpoints"))
    training = EngineSettings(lake=str(root / "training"), checkpoints=str(root / "unused"))
    write_days(training, ["2026-11-17", "2026-11-18"])
    uri = settings.table_uri(flow.table)
    with LocalSparkCluster(
        workers=2, cores=1, worker_memory="1g", folder=root / "spark-cluster"
    ) as cluster:
        done = subprocess.run(
            [sys.executable, "-c", ON_THE_CLUSTER, flow.topic, uri, training.lake, "2026-11-18"],
            env={
                **os.environ,
                # the only setting for where Spark runs
                "TIDELAKE_SPARK_MASTER": cluster.master_url,
                "TIDELAKE_LAKE": settings.lake,
                "TIDELAKE_CHECKPOINTS": settings.checkpoints,
                "TIDELAKE_LOG_LEVEL": "WARNING",
                "KAFKA_BOOTSTRAP_SERVERS": kafka_conf["bootstrap.servers"],
            },
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        yield ClusterRun(cluster, report, uri, training, done.stdout)
    delete_topic(kafka_conf, flow.topic)


def test_the_stream_and_a_backfill_run_on_executors_of_the_cluster(cluster_run: ClusterRun) -> None:
    run, good = cluster_run, cluster_run.report.good
    assert f"master {run.cluster.master_url}" in run.stdout
    assert duckdb_query(
        f"select count(*), count(distinct call_sid) from delta_scan('{run.table_uri}')"
    ) == [(good, good)]
    operations = [c["operation"] for c in DeltaTable(run.table_uri).history()]
    assert len(operations) >= 2, operations
    assert "backfilled" in run.stdout
    # executors ran in JVMs the workers started: each wrote its own stderr under the work dir
    executor_logs = list(Path(run.cluster.folder).glob("worker-*/app-*/*/stderr"))
    assert {p.parts[-4] for p in executor_logs} == {"worker-1", "worker-2"}, executor_logs


def test_the_anomaly_model_trains_on_the_cluster(cluster_run: ClusterRun) -> None:
    version, recall, baselines = cluster_run.stdout.split()[-3:]
    assert float(recall) >= 0.9 and int(baselines) > 0, cluster_run.stdout
    stored = latest_model(cluster_run.training.lake)  # read back with delta-rs, outside Spark
    assert stored is not None and stored[0].version == int(version)
    assert len(stored[1]) == int(baselines)
