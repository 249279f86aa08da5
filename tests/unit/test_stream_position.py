"""A stream's position read from outside: the checkpoint's newest commit, lag.

Closed dates need Kafka: tests/integration/test_supervisor.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.delta.progress import table_progress
from tidelake.streaming.kafka.offsets import KafkaSourceError
from tidelake.streaming.stream.status import committed_batch, kafka_ends, stream_lag


def _write_batch(root: Path, batch: int, offsets: str, committed: bool) -> None:
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "commits").mkdir(parents=True, exist_ok=True)
    (root / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{offsets}\n')
    if committed:
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


def test_committed_batch_is_the_newest_with_a_commit_file(tmp_path: Path) -> None:
    assert committed_batch(tmp_path, "t") is None
    _write_batch(tmp_path, 0, '{"t":{"0":5,"1":7}}', committed=True)
    _write_batch(tmp_path, 1, '{"t":{"0":9,"1":7}}', committed=False)  # planned, not written
    (tmp_path / "commits" / ".0.crc").write_text("")
    batch = committed_batch(tmp_path, "t")
    assert batch is not None and batch.batch_id == 0 and batch.offsets == {0: 5, 1: 7}
    assert abs(batch.committed_at - datetime.now(UTC)) < timedelta(minutes=1)


def test_lag_counts_whole_partitions_before_the_first_commit(tmp_path: Path) -> None:
    assert stream_lag({0: 10, 1: 4}, {}).total == 14
    _write_batch(tmp_path, 3, '{"t":{"0":8}}', committed=True)
    lag = stream_lag({0: 10, 1: 4}, committed_batch(tmp_path, "t").offsets)
    assert lag.by_partition == {0: 2, 1: 4} and lag.total == 6


def test_missing_table_has_no_progress(tmp_path: Path) -> None:
    assert table_progress(str(tmp_path / "nothing"), CALL_EVENTS) is None


def test_unreachable_broker_fails_within_the_timeout(closed_port: int) -> None:
    with pytest.raises(KafkaSourceError, match="cannot reach Kafka"):
        kafka_ends({"bootstrap.servers": f"127.0.0.1:{closed_port}"}, "t", timeout_s=1.0)
