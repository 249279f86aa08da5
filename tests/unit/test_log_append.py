"""A stream's batch appended as the next version of the Delta log by name (delta/log_append.py):
real delta-rs tables on local disk, read back by delta-rs; what it saves is a benchmark
(bench/delta_log_age.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import write_deltalake
from stream_batches import batch_rows, commit_batch

from tidelake.streaming.delta import commit
from tidelake.streaming.delta.log_append import (
    UnsupportedTableError,
    entry_uri,
    require_blind_appends,
)
from tidelake.streaming.delta.tables import open_table


def numbers(uri: str) -> list[int]:
    return sorted(open_table(uri).to_pyarrow_table()["n"].to_pylist())


def test_batches_are_appended_without_reading_the_snapshot_again(tmp_path: Path) -> None:
    """The kept-open snapshot stays where it was read; the versions, the batches and the
    history delta-rs reads are the stream's."""
    uri = str(tmp_path / "events")
    commit_batch(uri, 1)
    kept = commit._open_tables[uri]
    read_at, version = kept.snapshot.version(), kept.version
    for batch in (2, 3, 4):
        commit_batch(uri, batch)
    assert (kept.snapshot.version(), kept.version) == (read_at, version + 3)
    table = open_table(uri)
    assert numbers(uri) == [1, 2, 3, 4]
    assert table.transaction_version("app") == 4
    newest = table.history(1)[0]
    assert (newest["operation"], newest["tidelake.batch"]) == ("WRITE", 4)
    assert newest["operationParameters"]["mode"] == "Append"


def test_an_old_snapshot_is_read_again_before_an_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "events")
    commit_batch(uri, 1)
    commit_batch(uri, 2)
    monkeypatch.setattr(commit, "REREAD_AFTER_S", 0.0)
    commit_batch(uri, 3)
    kept = commit._open_tables[uri]
    assert kept.snapshot.version() == kept.version - 1  # read before batch 3, not after


def test_versions_taken_by_other_writers_are_read_by_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two appends of another writer and another stream's batch land behind the kept-open
    table; the next batch goes after them, and the other stream's batch is known by name."""
    uri = str(tmp_path / "events")
    commit_batch(uri, 1)
    kept = commit._open_tables.pop(uri)
    write_deltalake(uri, batch_rows(100), mode="append")
    commit_batch(uri, 7, app_id="other")
    commit._open_tables[uri] = kept
    commit_batch(uri, 2)
    assert numbers(uri) == [1, 2, 7, 100]
    assert open_table(uri).version() == kept.version == 4
    assert kept.transaction_version("other") == 7
    assert "batch 2 of app lost a commit race (1); read the log up to version 3" in caplog.text


def test_a_protocol_change_another_writer_commits_stops_the_append(tmp_path: Path) -> None:
    uri = str(tmp_path / "events")
    commit_batch(uri, 1)
    protocol = {
        "protocol": {
            "minReaderVersion": 1,
            "minWriterVersion": 7,
            "writerFeatures": ["appendOnly", "rowTracking", "domainMetadata"],
        }
    }
    Path(entry_uri(uri, 2)).write_text(json.dumps(protocol) + "\n")
    with pytest.raises(UnsupportedTableError, match="domainMetadata, rowTracking"):
        commit_batch(uri, 2)
    assert not Path(entry_uri(uri, 3)).exists()


@pytest.mark.parametrize(
    ("protocol", "allowed"),
    [
        ({"minWriterVersion": 2}, True),
        ({"minWriterVersion": 7, "writerFeatures": ["appendOnly", "timestampNtz"]}, True),
        ({"minWriterVersion": 7, "writerFeatures": ["columnMapping"]}, False),
        ({"minWriterVersion": 4}, False),  # generated columns, change data feed
    ],
)
def test_the_writer_features_a_stream_appends_under(
    protocol: dict[str, object], allowed: bool
) -> None:
    if allowed:
        require_blind_appends(protocol, "t")
    else:
        with pytest.raises(UnsupportedTableError, match=r"^t needs writer features"):
            require_blind_appends(protocol, "t")
