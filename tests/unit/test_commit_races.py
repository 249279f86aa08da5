"""A commit that loses a race to another writer tries again on the table's new snapshot, with
real delta-rs tables on local disk: the other writer's commit is placed between a writer's read
of the table and its commit. A stream's batch is committed once (skipped when the other writer
was a zombie of the same batch); a compaction plans again instead of failing its run."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake
from stream_batches import DAY, batch_rows, commit_batch, commit_elsewhere

from tidelake.streaming.delta import maintenance
from tidelake.streaming.delta.maintenance import compact_partition
from tidelake.streaming.delta.tables import open_table


@pytest.mark.parametrize(("batch", "committed"), [(2, [1, 2]), (3, [1, 2, 3])])
def test_a_stream_commit_that_loses_a_race_commits_its_batch_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, batch: int, committed: list[int]
) -> None:
    """The stream keeps its table open across batches; another writer commits batch 2 behind
    it (a zombie driver of the same batch). Batch 2 then finds itself recorded and is skipped;
    batch 3 is committed."""
    uri = str(tmp_path / "events")
    commit_batch(uri, 1)
    commit_elsewhere(uri, 2, 2)  # the other writer, which this process's table does not see
    commit_batch(uri, batch)
    table = open_table(uri)
    assert sorted(table.to_pyarrow_table()["n"].to_pylist()) == committed
    assert table.version() == len(committed)
    assert f"batch {batch} of app lost a commit race (1)" in caplog.text


def test_a_date_replaced_while_it_is_compacted_is_compacted_again_without_its_old_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "events")
    for n in range(3):  # three small files of the date
        write_deltalake(uri, batch_rows(n), partition_by=["date"], mode="append")
    opened: list[DeltaTable] = []

    def open_then_replace_the_date(table_uri: str) -> DeltaTable:
        """The compaction reads the table, then a backfill replaces the date before it commits."""
        table = open_table(table_uri)
        if not opened:
            write_deltalake(
                uri, batch_rows(10, 11), mode="overwrite", predicate=f"date = '{DAY.isoformat()}'"
            )
            write_deltalake(uri, batch_rows(12), mode="append")
        opened.append(table)
        return table

    monkeypatch.setattr(maintenance, "open_table", open_then_replace_the_date)

    result = compact_partition(uri, "date", DAY.isoformat())

    assert len(opened) == 2  # the first plan lost the race, the second committed
    assert (result.before.files, result.after.files) == (2, 1)
    table = open_table(uri)
    assert sorted(table.to_pyarrow_table()["n"].to_pylist()) == [10, 11, 12]
    assert len(table.file_uris()) == 1
