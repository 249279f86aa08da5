"""What each micro-batch pays for beyond its rows: the same generated code every batch, and no
process forked per file that Spark writes on the local disk (docs/benchmarks.md, issue 32)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from lake_readers import rows_added_by_version
from live_stream import produce_and_stream, running_stream, wait_for_rows

from tidelake.platform.dev.dagster_web import wait_for
from tidelake.platform.dev.produce import produce_demo_events
from tidelake.streaming.stream.query import FlowStream, await_query


def _generated_code(query: Any, spark: Any) -> str:
    """The Java that Spark generated for the query's last micro-batch (plan text left out)."""
    plan = query._jsq.streamingQuery().lastExecution().executedPlan()
    text = spark._jvm.org.apache.spark.sql.execution.debug.package.codegenString(plan)
    return "\n".join(line for line in text.splitlines() if line.startswith("/* "))


def _next_batch(query: Any, after: int, timeout_s: float = 60) -> int:
    def next_with_rows() -> int | None:
        progress = query.lastProgress
        if progress and progress["batchId"] > after and progress["numInputRows"] > 0:
            return int(progress["batchId"])
        return None

    return wait_for(next_with_rows, timeout_s, f"a micro-batch with rows after {after}", 0.1)


def test_every_micro_batch_runs_the_code_generated_for_the_first(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    # a literal that changes per batch (current_timestamp() did) makes Spark compile the whole
    # decode stage again, and the JIT with it, for every micro-batch
    with running_stream(spark, flow, engine_settings, kafka_conf) as stream:
        (query,) = [q for q in spark.streams.active if q.name == stream.query_name]
        codes, batch = [], -1
        for wave in range(3):
            produce_demo_events(flow, kafka_conf, count=20, seed=wave, progress=False)
            batch = _next_batch(query, batch)
            codes.append(_generated_code(query, spark))
    assert "GeneratedIteratorForCodegenStage1" in codes[0]
    assert codes[1] == codes[0] and codes[2] == codes[0]


def test_a_started_stream_commits_a_small_first_batch_then_full_ones(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    settings = engine_settings.model_copy(
        update={"first_batch_offsets": 200, "max_offsets_per_trigger": 1000}
    )
    run = produce_and_stream(spark, flow, settings, kafka_conf, count=1500, seed=3)
    sizes = [rows for rows in rows_added_by_version(run.stream.table_uri) if rows]
    assert run.table.num_rows == run.report.good
    assert sizes[0] <= 200 < sizes[1] <= 1000, sizes


def test_a_stream_started_on_an_empty_topic_commits_what_arrives_later(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any
) -> None:
    # the small first batch runs as a query triggered once a day: started on a topic with
    # nothing to read, it waited that long for its batch (found by bench/soak.py)
    stream = FlowStream(flow, engine_settings, kafka_conf)
    stream.preflight()
    query = stream.start(spark)
    stop = threading.Event()
    runner = threading.Thread(target=await_query, args=(query, stop), daemon=True)
    runner.start()
    try:
        report = produce_demo_events(flow, kafka_conf, count=50, seed=5, progress=False)
        rows = wait_for_rows(stream.table_uri, report.good, timeout_s=120)
    finally:
        stop.set()
        runner.join(timeout=60)
    assert rows == report.good


def test_writing_checkpoint_files_forks_no_process(spark: Any, tmp_path: Path) -> None:
    # without Hadoop's native library, its local filesystem forked chmod for every file it
    # created and readlink for every rename (dev.tidelake.hadoop.NioRawLocalFileSystem)
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager
    files = manager.create(jvm.org.apache.hadoop.fs.Path(tmp_path.as_uri()), conf)
    forks_before = _forks()
    for i in range(20):
        out = files.createAtomic(jvm.org.apache.hadoop.fs.Path(f"{tmp_path.as_uri()}/{i}"), False)
        out.write(b"x")
        out.close()
    forks = _forks() - forks_before
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == sorted(
        str(i) for i in range(20)
    )
    assert oct((tmp_path / "0").stat().st_mode & 0o777) == "0o644"
    assert forks < 10, f"{forks} processes forked while writing 20 checkpoint files"


def _forks() -> int:
    """Processes created on this machine since boot (/proc/stat)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("processes "):
            return int(line.split()[1])
    raise AssertionError("no processes line in /proc/stat")


def test_every_micro_batch_is_one_line_of_the_progress_log(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any, tmp_path: Path
) -> None:
    settings = engine_settings.model_copy(
        update={
            "first_batch_offsets": 100,
            "max_offsets_per_trigger": 300,
            "progress_log": tmp_path,
        }
    )
    run = produce_and_stream(spark, flow, settings, kafka_conf, count=900, seed=4)
    log_file = tmp_path / f"{run.stream.query_name}.jsonl"

    def all_lines() -> list[dict[str, Any]] | None:
        lines = [json.loads(line) for line in log_file.read_text().splitlines()]
        return lines if sum(line["numInputRows"] for line in lines) >= 900 else None

    lines = wait_for(all_lines, 10, "the follower to write the last batch as it ends", 0.2)
    batches = [line["batchId"] for line in lines]
    assert batches == sorted(set(batches)) and len(batches) >= 4, batches
    assert sum(line["numInputRows"] for line in lines) == 900
    assert all(line["tidelake"]["commit_ms"] > 0 for line in lines)
    assert all(line["tidelake"]["write_ms"] > 0 for line in lines)
    assert all("allRemovalsTimeMs" in line["stateOperators"][0] for line in lines)
