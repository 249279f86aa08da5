"""What grows with a stream's age, where an operator looks: the stream's observations carry
its deduplication state, commit time, log entries since the table's checkpoint and checkpoint
folder size, with their bounds."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from live_stream import produce_and_stream

from tidelake.assets.stream.health import HEALTH_HEARTBEAT_S
from tidelake.assets.stream.job import ProgressReporter, StreamPlaces
from tidelake.streaming.schemas.writer_schemas import WriterSchemas
from tidelake.streaming.settings import DELTA_CHECKPOINT_INTERVAL
from tidelake.streaming.stream.status import log_since_checkpoint

ROWS = pa.table({"n": pa.array([1], pa.int64())})


def test_log_entries_since_the_checkpoint_are_found_by_name(tmp_path: Path) -> None:
    """_last_checkpoint and the versions after it, looked up by name, agree with delta-rs at
    every count of entries since the checkpoint; a folder without a log has none."""
    uri = str(tmp_path / "table")
    assert log_since_checkpoint(uri) is None
    write_deltalake(uri, ROWS)
    for appended in range(1, 12):
        write_deltalake(uri, ROWS, mode="append")
        found = log_since_checkpoint(uri)
        assert found is not None and found.checkpoint_version is None
        assert (found.version, found.entries) == (appended, appended + 1)
    table = DeltaTable(uri)
    table.create_checkpoint()
    checkpointed = table.version()
    for after in range(0, 9):
        found = log_since_checkpoint(uri)
        assert found is not None and found.checkpoint_version == checkpointed
        assert found.version == DeltaTable(uri).version()
        assert found.entries == after
        write_deltalake(uri, ROWS, mode="append")


def test_the_streams_observation_carries_its_age_with_its_bounds(
    spark: Any, kafka_conf: dict[str, Any], flow: Any, engine_settings: Any, tmp_path: Path
) -> None:
    """The reporter's observation holds the state's figures of Spark's progress, the writer's
    commit time of that batch, the log entries since the table's checkpoint and the checkpoint
    folder's bytes, as numbers (plotted by the UI), with the bounds the settings give them."""
    settings = engine_settings.model_copy(
        update={"max_offsets_per_trigger": 200, "progress_log": tmp_path / "progress"}
    )
    run = produce_and_stream(spark, flow, settings, kafka_conf, count=600, seed=7)
    stream = run.stream
    lines = (tmp_path / "progress" / f"{stream.query_name}.jsonl").read_text().splitlines()
    progress = json.loads(lines[-1])
    state = progress["stateOperators"][0]

    class Query:  # what the reporter reads of a StreamingQuery besides the progress
        name = stream.query_name

    # what Spark reports every 10 s while no data comes: a batch id that did not run (the
    # next one; this stream ran one more, with no rows, after its last logged progress)
    idle = {**progress, "batchId": progress["batchId"] + 1_000, "numInputRows": 0}
    idle["stateOperators"] = []
    clock = iter([0.0, HEALTH_HEARTBEAT_S])

    @dg.op
    def report(context) -> None:  # type: ignore[no-untyped-def]  # dagster reads the hint
        places = StreamPlaces(stream.table_uri, stream.checkpoint, stream.batch_times)
        reporter = ProgressReporter(
            context, flow, kafka_conf, WriterSchemas(flow, None), places, clock=lambda: next(clock)
        )
        reporter(Query(), progress)  # type: ignore[arg-type]
        reporter(Query(), idle)  # type: ignore[arg-type]

    context = dg.build_op_context()
    report(context)
    observed, while_idle = [e for e in context.get_events() if isinstance(e, dg.AssetObservation)]
    # the idle observation shows the last batch's state and commit
    assert {k: v for k, v in while_idle.metadata.items() if k.startswith(("state_", "commit"))} == {
        k: v for k, v in observed.metadata.items() if k.startswith(("state_", "commit"))
    }
    figures = {k: v.value for k, v in observed.metadata.items()}
    assert figures["state_memory_bytes"] == state["memoryUsedBytes"] > 0
    assert figures["state_disk_bytes"] == state["customMetrics"]["rocksdbSstFileSize"] > 0
    assert figures["state_keys_written"] == state["numRowsUpdated"] > 0
    assert "state_keys" not in figures  # the session does not count them (status.StateSize)
    assert figures["commit_ms"] == round(progress["tidelake"]["commit_ms"], 1) > 0
    version = DeltaTable(stream.table_uri).version()
    checkpoint = Path(stream.table_uri, "_delta_log", "_last_checkpoint")
    since = json.loads(checkpoint.read_text())["version"] if checkpoint.exists() else -1
    assert figures["log_entries_since_checkpoint"] == version - since > 0
    assert figures["log_entries_since_checkpoint_bound"] == DELTA_CHECKPOINT_INTERVAL
    on_disk = sum(
        os.path.getsize(os.path.join(folder, name))
        for folder, _, names in os.walk(stream.checkpoint)
        for name in names
    )
    assert figures["checkpoint_bytes"] == on_disk > 0
    assert figures["checkpoint_batches_retained"] == int(
        spark.conf.get("spark.sql.streaming.minBatchesToRetain")
    )
    assert all(isinstance(v, (int, float)) for v in figures.values())
    assert "delta.checkpointInterval" in (observed.description or "")
