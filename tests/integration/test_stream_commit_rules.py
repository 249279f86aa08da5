"""The stream's own Delta commits (delta/commit.py, delta/log_append.py) keep Delta's rules when
another process changes the table under them or dies in the middle of a put, and name their
files as URIs that delta-spark and delta-rs both read. Tables on local disk."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from lake_readers import read_delta
from stream_batches import commit_batch

from tidelake.streaming.delta.commit import DeltaCommitError, commit_files
from tidelake.streaming.delta.files import write_arrow_files, write_data_files
from tidelake.streaming.delta.log_append import entry_uri, read_entry
from tidelake.streaming.delta.maintenance import upkeep_log
from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.storage.conditional_put import LEFTOVER_AFTER_S
from tidelake.streaming.stream.guard import StreamGuardError, check_table_files_exist

DAY = dt.date(2026, 11, 26)
NARROW = pa.schema([("n", pa.int32()), ("date", pa.date32())])


def commit_narrow(uri: str, batch: int) -> None:
    """Batch `batch` of stream "app" in a table whose `n` is a 32-bit integer."""
    rows = pa.table({"n": [batch], "date": [DAY]}, schema=NARROW)
    files = write_arrow_files(rows, uri, "date", f"app-{batch}-{uuid.uuid4().hex[:6]}")
    commit_files(uri, files, schema=NARROW, partition_by=["date"], app_id="app", version=batch)


METADATA_CHANGES = {
    # what delta/evolution.py's widening commits: every file rewritten with the wider column
    "widened": """
table = DeltaTable(uri).to_pyarrow_table().select(["n", "date"])
wide = pa.schema([("n", pa.int64()), ("date", pa.date32())])
write_deltalake(uri, table.cast(wide), mode="overwrite", schema_mode="overwrite",
                partition_by=["date"])
""",
    "repartitioned": """
table = DeltaTable(uri).to_pyarrow_table()
write_deltalake(uri, table, mode="overwrite", schema_mode="overwrite", partition_by=["n"])
""",
    # another writer's CREATE OR REPLACE with the same columns, `n` now NOT NULL
    "made non-null": """
table = DeltaTable(uri).to_pyarrow_table().select(["n", "date"])
strict = pa.schema([pa.field("n", pa.int32(), nullable=False), ("date", pa.date32())])
write_deltalake(uri, table.cast(strict), mode="overwrite", schema_mode="overwrite",
                partition_by=["date"])
""",
    # what delta/evolution.py commits for a new field of the message
    "column added": """
DeltaTable(uri).alter.add_columns([Field("note", "string", nullable=True)])
""",
}


def change_metadata_in_another_process(uri: str, change: str) -> None:
    code = (
        "import sys\nimport pyarrow as pa\nfrom deltalake import DeltaTable, write_deltalake\n"
        "from deltalake.schema import Field\nuri = sys.argv[1]\n" + METADATA_CHANGES[change]
    )
    subprocess.run([sys.executable, "-c", code, uri], check=True, timeout=120)


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ("widened", r"has other column types: n: table int64, stream int32"),
        ("repartitioned", r"is partitioned by \['n'\], the stream writes \['date'\]"),
        ("made non-null", r"requires \['n'\] to be non-null, which the stream writes as"),
        ("column added", None),
    ],
)
def test_a_metadata_change_by_another_process_makes_the_batch_fit_again_or_refused(
    tmp_path: Path, change: str, refusal: str | None
) -> None:
    """The stream validated its batches against the table it opened; another process changes
    the table's metadata before the next batch's put. That put finds its version taken, reads
    the change by name and checks the batch against the new metadata: files of a column
    type, a partitioning or a nullability the table no longer has are refused (delta-spark
    aborts with MetadataChangedException), files still valid (a nullable column added) are
    appended."""
    uri = str(tmp_path / "events")
    commit_narrow(uri, 1)
    change_metadata_in_another_process(uri, change)
    changed_at = open_table(uri).version()
    if refusal is not None:
        with pytest.raises(DeltaCommitError, match=refusal):
            commit_narrow(uri, 2)
        assert read_entry(uri, changed_at + 1) is None  # nothing appended after the change
        assert open_table(uri).transaction_version("app") == 1
        return
    commit_narrow(uri, 2)
    table = open_table(uri)
    assert table.version() == changed_at + 1
    rows = sorted(zip(*read_delta(uri).select(["n", "note"]).to_pydict().values(), strict=True))
    assert rows == [(1, None), (2, None)]


CRASH_BEFORE_LINK = """
import os, signal, sys
from tidelake.streaming.delta.log_append import put_entry

def killed(*_):  # the process dies after writing the entry's temporary file, before its link
    os.kill(os.getpid(), signal.SIGKILL)

os.link = killed
put_entry(sys.argv[1], int(sys.argv[2]), b'{"commitInfo":{}}\\n')
"""


def test_a_writer_killed_between_writing_and_linking_its_entry_leaves_the_table_readable(
    tmp_path: Path,
) -> None:
    """The put writes the whole entry to a temporary file, forces it, then links it as the
    version: a process killed in between leaves no version (never an empty one), the stream's
    next batch takes that version, and the log upkeep deletes the leftover once it is older
    than any live put's."""
    uri = str(tmp_path / "events")
    commit_batch(uri, 1)
    killed = subprocess.run(
        [sys.executable, "-c", CRASH_BEFORE_LINK, uri, "2"], timeout=120, check=False
    )
    assert killed.returncode == -signal.SIGKILL
    log = Path(uri, "_delta_log")
    (leftover,) = [p for p in log.iterdir() if p.name.endswith(".tmp")]
    assert leftover.name.startswith(f"_{2:020d}.json.")
    assert leftover.read_bytes() == b'{"commitInfo":{}}\n'
    assert not Path(entry_uri(uri, 2)).exists()
    assert read_delta(uri)["n"].to_pylist() == [1]

    assert upkeep_log(uri).leftovers_removed == ()  # young: it could be a live writer's
    commit_batch(uri, 2)
    long_ago = leftover.stat().st_mtime - LEFTOVER_AFTER_S - 60
    os.utime(leftover, (long_ago, long_ago))
    assert upkeep_log(uri).leftovers_removed == (leftover.name,)
    assert not leftover.exists()
    assert sorted(read_delta(uri)["n"].to_pylist()) == [1, 2]
    assert open_table(uri).version() == 2


LABELS = ["a b", "50%", "x/y", "plain"]


def test_add_paths_of_escaped_partition_folders_read_in_delta_spark_and_delta_rs(
    spark: Any, tmp_path: Path
) -> None:
    """Partition values with a space, a '%' or a '/' in folders named by Spark (its own
    escapes) and by the driver (delta/files.py's), committed by the stream's append: the add
    paths are URIs (PROTOCOL.md), which both readers decode to the files."""
    uri = str(tmp_path / "labels")
    schema = pa.schema([("n", pa.int64()), ("label", pa.string())])
    rows = list(enumerate(LABELS))
    by_spark = spark.createDataFrame(rows, "n long, label string")
    by_driver = pa.table({"n": [10 + n for n, _ in rows], "label": LABELS}, schema=schema)
    for batch, files in enumerate(
        [
            write_data_files(by_spark, uri, "label", "batch-1"),
            write_arrow_files(by_driver, uri, "label", "batch-2"),
        ],
        start=1,
    ):
        commit_files(uri, files, schema=schema, partition_by=["label"], app_id="app", version=batch)
    expected = sorted(rows + [(10 + n, label) for n, label in rows])
    by_delta_rs = read_delta(uri).select(["n", "label"]).to_pylist()
    assert sorted((row["n"], row["label"]) for row in by_delta_rs) == expected
    by_delta_spark = spark.read.format("delta").load(uri).select("n", "label").collect()
    assert sorted((row.n, row.label) for row in by_delta_spark) == expected


def test_the_start_up_guard_finds_the_files_of_percent_encoded_add_paths(tmp_path: Path) -> None:
    """The guard looks for the files the snapshot names: it decodes the log's add paths (URIs)
    first, so files in escaped partition folders are found and the stream starts; a file that
    is really gone is still refused."""
    uri = str(tmp_path / "labels")
    schema = pa.schema([("n", pa.int64()), ("label", pa.string())])
    rows = pa.table({"n": list(range(len(LABELS))), "label": LABELS}, schema=schema)
    files = write_arrow_files(rows, uri, "label", "batch-1")
    commit_files(uri, files, schema=schema, partition_by=["label"], app_id="app", version=1)
    assert any(
        "%25" in p for p in open_table(uri).get_add_actions(flatten=True)["path"].to_pylist()
    )
    check_table_files_exist("labels", uri)
    Path(uri, next(f.path for f in files if f.partition_values["label"] == "a b")).unlink()
    with pytest.raises(StreamGuardError, match=r"names 1 data file\(s\) that do not exist"):
        check_table_files_exist("labels", uri)
