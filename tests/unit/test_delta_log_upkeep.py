"""The Delta log over a stream's age (issue 38): tidelake's tables carry the log retention that
TIDELAKE_DELTA_LOG_RETENTION sets, the stream's commits leave the log's upkeep alone, and the
upkeep (maintenance) checkpoints the log and cuts what is older than the retention. Real delta-rs
tables on local disk; the commit path's cost is a benchmark (bench/delta_log_age.py)."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import pytest
from deltalake import write_deltalake
from stream_batches import SCHEMA, batch_rows, commit_batch

from tidelake.streaming import settings
from tidelake.streaming.delta import commit
from tidelake.streaming.delta.commit import (
    batch_recorded,
    ensure_table,
    table_transaction,
)
from tidelake.streaming.delta.log_append import entry_uri
from tidelake.streaming.delta.maintenance import upkeep_log, vacuum_table
from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.errors import ConfigError
from tidelake.streaming.settings import load_engine_settings
from tidelake.streaming.storage.conditional_put import LEFTOVER_AFTER_S

RETENTION = "delta.logRetentionDuration"


def log_names(uri: str) -> set[str]:
    return set(os.listdir(Path(uri) / "_delta_log"))


def age_log(uri: str, hours: float) -> None:
    """Make every log file look written `hours` ago, as the cleanup judges age."""
    then = time.time() - hours * 3600
    for name in log_names(uri):
        os.utime(Path(uri) / "_delta_log" / name, (then, then))


def test_a_table_the_stream_creates_carries_the_log_retention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDELAKE_DELTA_LOG_RETENTION", "36 hours")
    uri = str(tmp_path / "events")
    commit_batch(uri, 1)
    assert open_table(uri).metadata().configuration[RETENTION] == "interval 36 hours"


def test_a_table_without_it_gets_it_when_the_stream_opens_it(tmp_path: Path) -> None:
    uri = str(tmp_path / "events")
    write_deltalake(uri, batch_rows(0), partition_by=["date"])
    assert RETENTION not in open_table(uri).metadata().configuration
    commit_batch(uri, 1)
    assert open_table(uri).metadata().configuration[RETENTION] == "interval 24 hours"
    assert sorted(open_table(uri).to_pyarrow_table()["n"].to_pylist()) == [0, 1]


def test_stream_commits_leave_expired_entries_and_the_upkeep_cuts_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDELAKE_DELTA_LOG_RETENTION", "1 hour")
    uri = str(tmp_path / "events")
    for batch in range(1, 5):
        commit_batch(uri, batch)
    open_table(uri).create_checkpoint()  # version 4: what an earlier upkeep left
    age_log(uri, hours=2)  # everything so far is past the retention
    old_commits = {f"{v:020d}.json" for v in range(4)}
    assert old_commits <= log_names(uri)

    for batch in range(5, 8):  # the stream commits on: its commits delete nothing
        commit_batch(uri, batch)
    assert old_commits <= log_names(uri)
    assert not any(n.startswith(f"{v:020d}.checkpoint") for v in (5, 6, 7) for n in log_names(uri))

    result = upkeep_log(uri)
    assert result.table_version == 7
    assert not old_commits & log_names(uri)
    assert f"{7:020d}.checkpoint.parquet" in log_names(uri)
    assert result.entries_after < result.entries_before
    table = open_table(uri)
    assert sorted(table.to_pyarrow_table()["n"].to_pylist()) == list(range(1, 8))
    assert table.transaction_version("app") == table_transaction(uri, "app") == 7


def test_the_stream_checkpoints_its_table_every_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in (commit, settings):
        monkeypatch.setattr(module, "DELTA_CHECKPOINT_INTERVAL", 3)
    uri = str(tmp_path / "events")
    for batch in range(1, 8):
        commit_batch(uri, batch)
    checkpoints = sorted(n for n in log_names(uri) if n.endswith(".checkpoint.parquet"))
    assert checkpoints == [f"{3:020d}.checkpoint.parquet", f"{6:020d}.checkpoint.parquet"]
    table = open_table(uri)  # from the checkpoint at 6, and version 7
    assert table.metadata().configuration["delta.checkpointInterval"] == "3"
    assert sorted(table.to_pyarrow_table()["n"].to_pylist()) == list(range(1, 8))
    assert table.transaction_version("app") == 7


def test_a_replayed_batch_is_skipped_on_the_kept_open_table(tmp_path: Path) -> None:
    uri = str(tmp_path / "events")
    commit_batch(uri, 1)
    commit_batch(uri, 2)
    assert batch_recorded(uri, "app", 2) and not batch_recorded(uri, "app", 3)
    commit_batch(uri, 2)  # Spark replays a batch: recorded already, nothing committed
    assert sorted(open_table(uri).to_pyarrow_table()["n"].to_pylist()) == [1, 2]


def test_a_query_that_starts_commits_to_a_table_restored_from_an_older_copy(
    tmp_path: Path,
) -> None:
    """The kept-open snapshot is ahead of a restored copy; the query's start (ensure_table)
    drops it, so the next batch commits to the table as it is now."""
    uri, copy = tmp_path / "events", tmp_path / "copy"
    commit_batch(str(uri), 1)
    shutil.copytree(uri, copy)
    commit_batch(str(uri), 2)
    commit_batch(str(uri), 3)
    shutil.rmtree(uri)
    shutil.copytree(copy, uri)
    ensure_table(str(uri), SCHEMA, ["date"])
    assert not batch_recorded(str(uri), "app", 2)
    commit_batch(str(uri), 2)
    table = open_table(str(uri))
    assert sorted(table.to_pyarrow_table()["n"].to_pylist()) == [1, 2]
    assert table.transaction_version("app") == 2


@pytest.mark.parametrize(
    ("value", "problem"),
    [("forever", "expected one '<number> <unit>'"), ("30 minutes", "at least 1 hour")],
)
def test_a_wrong_log_retention_is_refused_naming_the_setting(
    value: str, problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDELAKE_DELTA_LOG_RETENTION", value)
    with pytest.raises(ConfigError, match=f"TIDELAKE_DELTA_LOG_RETENTION: {problem}"):
        load_engine_settings()


def test_the_retention_becomes_delta_s_interval() -> None:
    settings = load_engine_settings(delta_log_retention="2 Days")
    assert settings.delta_table_properties() == {
        RETENTION: "interval 2 days",
        "delta.deletedFileRetentionDuration": "interval 2 days",
        "delta.checkpointInterval": "100",
    }


def test_a_log_retention_the_kept_open_snapshot_could_outlive_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stream appends after a snapshot up to REREAD_AFTER_S old, which only a log that
    still holds every version since can refuse at a taken number: were that age ever raised to
    the shortest retention allowed, the settings refuse to load, naming the setting."""
    shortest = load_engine_settings(delta_log_retention="1 hour").delta_log_retention_seconds()
    assert shortest > settings.REREAD_AFTER_S
    monkeypatch.setattr(settings, "REREAD_AFTER_S", 2 * 3600.0)
    with pytest.raises(
        ConfigError, match=r"TIDELAKE_DELTA_LOG_RETENTION: longer than 7200 s, the age at which"
    ):
        load_engine_settings(delta_log_retention="1 hour")
    load_engine_settings(delta_log_retention="3 hours")


def test_a_vacuum_shorter_than_the_log_retention_is_refused_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full vacuum deletes every file the log does not name that is older than its retention:
    a file a stream has written and not committed yet among them. The floor is the log
    retention, as delta-spark's is the table's deletedFileRetentionDuration."""
    monkeypatch.setenv("TIDELAKE_DELTA_LOG_RETENTION", "2 hours")
    uri = str(tmp_path / "events")
    commit_batch(uri, 1)
    in_flight = Path(uri, "date=2026-11-26", "part-written-not-committed.parquet")
    in_flight.write_bytes(b"PAR1 a batch's file before its commit")
    an_hour_ago = time.time() - 3600
    os.utime(in_flight, (an_hour_ago, an_hour_ago))
    with pytest.raises(
        ConfigError,
        match=r"^a vacuum retention of 1 hours is shorter than TIDELAKE_DELTA_LOG_RETENTION=2 h",
    ):
        vacuum_table(uri, retention_hours=1)
    assert in_flight.exists()
    assert vacuum_table(uri, retention_hours=2).removed_files == 0
    commit_batch(uri, 2)
    assert sorted(open_table(uri).to_pyarrow_table()["n"].to_pylist()) == [1, 2]


def test_the_default_vacuum_retention_follows_a_log_retention_longer_than_a_week(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daily vacuum runs with the default retention: a week, or the log retention where
    that is longer, so a 10-day log retention does not make every scheduled vacuum refuse."""
    uri = str(tmp_path / "events")
    commit_batch(uri, 1)
    assert vacuum_table(uri).retention_hours == 168
    monkeypatch.setenv("TIDELAKE_DELTA_LOG_RETENTION", "10 days")
    assert vacuum_table(uri).retention_hours == 240
    with pytest.raises(ConfigError, match="shorter than TIDELAKE_DELTA_LOG_RETENTION=10 days"):
        vacuum_table(uri, retention_hours=168)


def test_the_upkeep_deletes_what_a_writer_that_died_before_linking_left(tmp_path: Path) -> None:
    """A put writes its entry to a temporary file, then links it as the version: a process
    killed in between leaves the file. The upkeep deletes such files once older than any live
    put's; a fresh one (a writer about to link it) stays."""
    uri = str(tmp_path / "events")
    commit_batch(uri, 1)
    left = Path(entry_uri(uri, 2)).with_name(f"_{2:020d}.json.{'a' * 32}.tmp")
    live = Path(entry_uri(uri, 2)).with_name(f"_{2:020d}.json.{'b' * 32}.tmp")
    # the JVM's AtomicLocalLogStore (delta-spark): `.<name>.<UUID.randomUUID()>.tmp`
    jvm_left = Path(entry_uri(uri, 2)).with_name(f".{2:020d}.json.{uuid.uuid4()}.tmp")
    jvm_live = Path(entry_uri(uri, 2)).with_name(f"._last_checkpoint.{uuid.uuid4()}.tmp")
    for temporary in (left, live, jvm_left, jvm_live):
        temporary.write_bytes(b'{"commitInfo":{}}\n')
    long_ago = time.time() - LEFTOVER_AFTER_S - 60
    os.utime(left, (long_ago, long_ago))
    os.utime(jvm_left, (long_ago, long_ago))

    result = upkeep_log(uri)

    assert sorted(result.leftovers_removed) == sorted((left.name, jvm_left.name))
    assert not left.exists() and live.exists()
    assert not jvm_left.exists() and jvm_live.exists()
    commit_batch(uri, 2)
    assert sorted(open_table(uri).to_pyarrow_table()["n"].to_pylist()) == [1, 2]
