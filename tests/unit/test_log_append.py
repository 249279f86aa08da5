"""A stream's batch appended as the next version of the Delta log by name (delta/log_append.py):
real delta-rs tables on local disk, read back by delta-rs; what it saves is a benchmark
(bench/delta_log_age.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from stream_batches import batch_rows, commit_batch, commit_elsewhere

from tidelake.streaming.delta import commit
from tidelake.streaming.delta.commit import batch_recorded, commit_files
from tidelake.streaming.delta.files import write_arrow_files
from tidelake.streaming.delta.log_append import (
    UnsupportedTableError,
    entry_uri,
    read_entry,
    require_blind_appends,
)
from tidelake.streaming.delta.tables import open_table


def numbers(uri: str) -> list[int]:
    return sorted(open_table(uri).to_pyarrow_table()["n"].to_pylist())


@pytest.fixture
def snapshot_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The versions at which delta-rs brought a table up to date (each lists `_delta_log`)."""
    reads: list[int] = []
    update = DeltaTable.update_incremental

    def counted(table: DeltaTable) -> None:
        update(table)
        reads.append(table.version())

    monkeypatch.setattr(DeltaTable, "update_incremental", counted)
    yield reads


def test_batches_are_appended_without_reading_the_snapshot_again(
    tmp_path: Path, snapshot_reads: list[int]
) -> None:
    """Once the table is open, a batch lists nothing; the versions, the batches and the history
    delta-rs reads are the stream's."""
    uri = str(tmp_path / "events")
    commit_batch(uri, 1)
    snapshot_reads.clear()
    for batch in (2, 3, 4):
        commit_batch(uri, batch)
    assert snapshot_reads == []
    table = open_table(uri)
    assert numbers(uri) == [1, 2, 3, 4]
    assert table.version() == 4 and table.transaction_version("app") == 4
    newest = table.history(1)[0]
    assert (newest["operation"], newest["tidelake.batch"]) == ("WRITE", 4)
    assert newest["operationParameters"]["mode"] == "Append"


def test_an_old_snapshot_is_read_again_before_an_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snapshot_reads: list[int]
) -> None:
    uri = str(tmp_path / "events")
    commit_batch(uri, 1)
    commit_batch(uri, 2)
    snapshot_reads.clear()
    monkeypatch.setattr(commit, "REREAD_AFTER_S", 0.0)
    commit_batch(uri, 3)
    assert snapshot_reads == [2]  # read before batch 3, not after
    assert numbers(uri) == [1, 2, 3]


def test_versions_taken_by_other_writers_are_read_by_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another writer's append and another stream's batch land behind the kept-open table; the
    next batch goes after them, and the other stream's batch is known by name."""
    uri = str(tmp_path / "events")
    commit_batch(uri, 1)
    write_deltalake(uri, batch_rows(100), mode="append")
    commit_elsewhere(uri, 3, 7, app_id="other")
    commit_batch(uri, 2)
    assert numbers(uri) == [1, 2, 7, 100]
    assert open_table(uri).version() == 4
    assert batch_recorded(uri, "other", 7)  # the kept-open table, not brought up to date
    assert "batch 2 of app lost a commit race (1); read the log up to version 3" in caplog.text


def test_the_latest_transaction_of_an_app_id_wins_not_the_highest(tmp_path: Path) -> None:
    """PROTOCOL.md: the latest `txn` of an app id is the table's, whatever its version (a stream
    that started over under the same app id). Read by name after another writer's commit, it
    replaces the one this process knew."""
    uri = str(tmp_path / "events")
    commit_batch(uri, 5)
    commit_elsewhere(uri, 2, 2)  # the same app id at batch 2: now the table's latest
    commit_batch(uri, 1, app_id="other")  # its put finds version 2 taken and reads it by name
    assert not batch_recorded(uri, "app", 4)
    assert batch_recorded(uri, "app", 2)
    assert open_table(uri).transaction_version("app") == 2  # delta-rs reads it so too


def test_a_log_older_than_the_version_committed_is_a_replaced_table(tmp_path: Path) -> None:
    """The table's folder swapped for an older copy: the next append puts no version after the
    copy's latest (a gap) and says what happened, naming both versions."""
    uri = str(tmp_path / "events")
    for batch in (1, 2, 3):
        commit_batch(uri, batch)
    for version in (2, 3):  # the log as a copy taken after version 1 has it
        os.unlink(entry_uri(uri, version))
    with pytest.raises(
        commit.TableReplacedError, match="latest version is 1, older than version 3"
    ):
        commit_batch(uri, 4)
    assert read_entry(uri, 2) is None and open_table(uri).version() == 1


def test_the_batch_check_reads_the_kept_open_snapshot_without_listing_the_log(
    tmp_path: Path, snapshot_reads: list[int]
) -> None:
    """Another writer's commit (here compaction's stand-in, an append of its own) is not seen by
    the check until this process commits again: the check costs no listing of `_delta_log`."""
    uri = str(tmp_path / "events")
    commit_batch(uri, 1)
    commit_elsewhere(uri, 2, 2)  # a zombie driver's batch 2
    snapshot_reads.clear()
    assert not batch_recorded(uri, "app", 2)
    assert snapshot_reads == []
    commit_batch(uri, 2)  # its put finds version 2 taken, reads it by name: skipped
    assert batch_recorded(uri, "app", 2)
    assert numbers(uri) == [1, 2]
    assert open_table(uri).version() == 2


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
        ({"minWriterVersion": 3}, True),  # CHECK constraints: checked row by row
        ({"minWriterVersion": 7, "writerFeatures": ["appendOnly", "timestampNtz"]}, True),
        ({"minWriterVersion": 7, "writerFeatures": ["checkConstraints", "deletionVectors"]}, True),
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


INVARIANT = {"delta.invariants": json.dumps({"expression": {"expression": "n < 100"}})}


@pytest.mark.parametrize("when", ["at start", "by another writer"])
def test_a_table_with_column_invariants_is_refused(tmp_path: Path, when: str) -> None:
    """Writer version 2 asks every writer to check the columns' delta.invariants: the stream
    does not, so it refuses such a table, whether it had them when the stream opened it or
    another writer set them since."""
    uri = str(tmp_path / "events")
    if when == "at start":
        schema = pa.schema([pa.field("n", pa.int64(), metadata=INVARIANT), ("date", pa.date32())])
        write_deltalake(uri, batch_rows(1).cast(schema), partition_by=["date"])
    else:  # delta-rs refuses to set delta.* column metadata: the other writer's entry by hand
        commit_batch(uri, 1)
        metadata = next(a["metaData"] for a in read_entry(uri, 0) or [] if "metaData" in a)
        schema = json.loads(metadata["schemaString"])
        next(f for f in schema["fields"] if f["name"] == "n")["metadata"] = INVARIANT
        metadata["schemaString"] = json.dumps(schema)
        Path(entry_uri(uri, 2)).write_text(json.dumps({"metaData": metadata}) + "\n")
    with pytest.raises(UnsupportedTableError, match=r"invariants \(delta.invariants on n\)"):
        commit_batch(uri, 200)  # which the invariant forbids
    assert 200 not in numbers(uri)


def test_add_paths_are_uris_delta_rs_reads(tmp_path: Path) -> None:
    """A partition value with a space, a '%' or a '/' sits in an escaped folder; the add path
    that names the file is that folder's name percent-encoded once more (PROTOCOL.md: the path
    is a URI), so that a reader decoding it finds the file."""
    uri = str(tmp_path / "labels")
    values = ["a b", "50%", "x/y", "plain"]
    rows = pa.table({"n": [1, 2, 3, 4], "label": values})
    files = write_arrow_files(rows, uri, "label", "batch-1")
    schema = pa.schema([("n", pa.int64()), ("label", pa.string())])
    commit_files(uri, files, schema=schema, partition_by=["label"], app_id="app", version=1)
    added = [action["add"] for action in read_entry(uri, 1) or [] if "add" in action]
    adds = {add["partitionValues"]["label"]: add["path"] for add in added}
    assert adds["a b"].startswith("label=a%2520b/") and adds["plain"].startswith("label=plain/")
    read = open_table(uri).to_pyarrow_table()
    assert sorted(zip(read["n"].to_pylist(), read["label"].to_pylist(), strict=True)) == sorted(
        zip([1, 2, 3, 4], values, strict=True)
    )


def test_an_entry_is_forced_to_disk_before_it_is_linked_and_its_folder_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a power loss a version is whole or absent, never an empty file that no reader
    gets past: the entry's data reaches the disk before its name, and the name before the put
    returns (as the JVM's AtomicLocalLogStore forces its file)."""
    uri = str(tmp_path / "events")
    commit_batch(uri, 1)
    calls: list[tuple[str, str]] = []
    fsync, link = os.fsync, os.link

    def forced(descriptor: int) -> None:
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{descriptor}")))
        fsync(descriptor)

    def linked(source: str, target: str) -> None:
        calls.append(("link", target))
        link(source, target)

    monkeypatch.setattr(os, "fsync", forced)
    monkeypatch.setattr(os, "link", linked)
    commit_batch(uri, 2)
    log_folder = Path(uri, "_delta_log").resolve()
    (first, temporary), *then = calls
    assert first == "fsync" and Path(temporary).parent == log_folder
    assert Path(temporary).name.startswith(f"_{2:020d}.json.")
    assert then == [("link", entry_uri(uri, 2)), ("fsync", str(log_folder))]
