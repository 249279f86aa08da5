"""The engine on a Spark standalone cluster: a master and two 1-core workers, each its own JVM,
executors in JVMs of their own, reached through TIDELAKE_SPARK_MASTER alone."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from demo_days import write_days
from lake_readers import duckdb_query

from tidelake.platform.dev.produce import produce_demo_events
from tidelake.platform.local.spark_cluster import LocalSparkCluster
from tidelake.streaming.calls.anomaly.store import latest_model
from tidelake.streaming.settings import EngineSettings

pytestmark = pytest.mark.cluster

STREAM_THEN_BACKFILL = """
import dataclasses, sys
from tidelake.streaming.batch.backfill import backfill_dates
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.stream.runner import run_flow_stream
from tidelake.streaming.spark.session import build_spark_session
from tidelake.streaming.settings import kafka_client_config, load_engine_settings

flow = dataclasses.replace(CALL_EVENTS, topic=sys.argv[1])
settings, conf = load_engine_settings(), kafka_client_config()
run_flow_stream(flow, settings, conf, available_now=True)
spark = build_spark_session(settings.spark_master)
print("master", spark.sparkContext.master)
table = spark.read.format("delta").load(sys.argv[2])
days = sorted({str(row.date) for row in table.select("date").distinct().collect()})
result = backfill_dates(spark, flow, days, settings, conf)
print("backfilled", days, result.rows)
"""


def _on_cluster(
    cluster: LocalSparkCluster,
    settings: EngineSettings,
    script: list[str],
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """A Python script (and its arguments) in a fresh process whose only setting for where
    Spark runs is TIDELAKE_SPARK_MASTER."""
    done = subprocess.run(
        [sys.executable, "-c", *script],
        env={
            **os.environ,
            "TIDELAKE_SPARK_MASTER": cluster.master_url,
            "TIDELAKE_LAKE": str(settings.lake),
            "TIDELAKE_CHECKPOINTS": str(settings.checkpoints),
            "TIDELAKE_LOG_LEVEL": "WARNING",
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSparkCluster]:
    with LocalSparkCluster(
        workers=2, cores=1, worker_memory="1g", folder=tmp_path_factory.mktemp("spark-cluster")
    ) as running:
        yield running


def test_the_stream_and_a_backfill_run_on_executors_of_the_cluster(
    cluster: LocalSparkCluster,
    kafka_conf: dict[str, Any],
    flow: Any,
    engine_settings: Any,
) -> None:
    report = produce_demo_events(
        flow,
        kafka_conf,
        count=2_000,
        malformed_share=0.0,
        duplicate_share=0.0,
        seed=5,
        progress=False,
    )
    uri = engine_settings.table_uri(flow.table)
    done = _on_cluster(
        cluster,
        engine_settings,
        [STREAM_THEN_BACKFILL, flow.topic, uri],
        {"KAFKA_BOOTSTRAP_SERVERS": kafka_conf["bootstrap.servers"]},
    )
    assert f"master {cluster.master_url}" in done.stdout
    assert duckdb_query(f"select count(*), count(distinct call_sid) from delta_scan('{uri}')") == [
        (report.good, report.good)
    ]
    operations = [c["operation"] for c in DeltaTable(uri).history()]
    assert len(operations) >= 2, operations
    assert "backfilled" in done.stdout
    # executors ran in JVMs the workers started: each wrote its own stderr under the work dir
    executor_logs = list(Path(cluster.folder).glob("worker-*/app-*/*/stderr"))
    assert {p.parts[-4] for p in executor_logs} == {"worker-1", "worker-2"}, executor_logs


TRAIN = """
import sys
from tidelake.streaming.calls.anomaly.training import train_model
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.spark.session import build_spark_session
from tidelake.streaming.settings import load_engine_settings

settings = load_engine_settings()
spark = build_spark_session(settings.spark_master)
trained = train_model(spark, CALL_EVENTS, settings, sys.argv[1])
print("model", trained.info.version, trained.info.metrics["recall"], len(trained.baselines))
"""


def test_the_anomaly_model_trains_on_the_cluster(
    cluster: LocalSparkCluster, tmp_path: Path
) -> None:
    settings = EngineSettings(lake=tmp_path / "lake", checkpoints=tmp_path / "checkpoints")
    write_days(settings, ["2026-11-17", "2026-11-18"])
    done = _on_cluster(cluster, settings, [TRAIN, "2026-11-18"])
    version, recall, baselines = done.stdout.split()[-3:]
    assert float(recall) >= 0.9 and int(baselines) > 0, done.stdout
    stored = latest_model(settings.lake)  # read back with delta-rs, outside Spark
    assert stored is not None and stored[0].version == int(version)
    assert len(stored[1]) == int(baselines)
