"""The stream's commit path on a Delta log that 30 days of a stream leave (issue 38).

Grows a call_events table's `_delta_log` directly to what 30 days of a stream's commits leave
under the table settings tidelake ships, then times N batches' commits as the stream makes them
(`streaming/delta/commit.py`: the replay check `batch_recorded`, then `commit_files` with one
file and one application transaction) on a new table and on the 30-day one in turns, on local
disk and on the local S3 server, and prints median and p95 of each and the ratio aged/new
(target: <= 1.2x on both stores). It also times the log upkeep on the aged log (`upkeep_log`:
the checkpoint, then the expired-log cleanup), the expiry of its oldest date (`expire_dates`,
the lake's retention) and, with --before-commits, the commit path as it
was before issue 38 (the table kept open with its file list, delta-rs's default post-commit
hooks) on the same tables.

How the 30-day log is grown, quickly and in Delta's own format: the table is created by tidelake
(its schema, its properties); one commit then holds what the 30 days before the retained window
leave in the table's state (a compacted file for each closed day, the stream's files of the days
not compacted yet, a tombstone for every file compaction removed within the file retention, the
stream's application transaction) and delta-rs checkpoints it; its JSON entries are deleted as
the log cleanup would have. The retained window (the log retention plus one upkeep period, the
most the upkeep lets stay) is then written entry by entry as the stream writes them (commitInfo,
txn, one add with the statistics of a real 6,000-row file), with the compaction commit of the
day that closed in it, commit times and (on local disk) file modification times spread over the
window; delta-rs writes the checkpoints the timed paths read: the first past the retention's
cut-off (the cleanup's boundary) and the newest, at the last multiple of delta.checkpointInterval
as the stream writes them (the ones in between are left out: a few hundred files among tens of
thousands, never read by a commit). On S3 the objects' modification times
are the upload's, so the cleanup there finds nothing expired and times its listing only.

    python bench/delta_log_age.py                      # both stores, the shipped settings
    python bench/delta_log_age.py --retention "1 hour" --store local
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import click
import pyarrow as pa
from common import lake_env, write_figures
from deltalake.transaction import AddAction, CommitProperties, Transaction

from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.delta import commit as delta_commit
from tidelake.streaming.delta import log_append
from tidelake.streaming.delta.commit import batch_recorded, commit_files
from tidelake.streaming.delta.evolution import contract_schema, evolve_table
from tidelake.streaming.delta.files import DataFile, write_arrow_files
from tidelake.streaming.delta.maintenance import expire_dates, upkeep_log
from tidelake.streaming.delta.progress import snapshot_progress
from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.settings import DELTA_CHECKPOINT_INTERVAL, EngineSettings
from tidelake.streaming.storage.location import filesystem

APP_ID = "tidelake-bench-query"
SEED_APP_ID = "tidelake-bench-seed"
"""The writer of seed_tombstones' one commit, a writer of its own beside the stream."""
DAY_S = 86_400
_UNIT_S = {"m": 60, "h": 3600, "d": DAY_S}


def duration_s(text: str) -> int:
    number, unit = text.split()
    return int(number) * _UNIT_S[unit[0].lower()]


@dataclass(frozen=True)
class StreamShape:
    """What a stream leaves in its table's log, and what tidelake's settings keep of it."""

    rate: float  # commits a second
    days: int  # the stream's age
    retention_s: int  # delta.logRetentionDuration
    upkeep_s: int  # period of the log upkeep
    file_retention_s: int  # delta.deletedFileRetentionDuration: tombstones kept
    compaction_delay_s: int = 1800  # a closed day is compacted this long after midnight

    @property
    def window_s(self) -> int:
        return self.retention_s + self.upkeep_s


@dataclass
class Entry:
    at_s: float  # seconds since the epoch
    lines: list[str]
    version: int = 0


def stream_rows(n: int, day: date, seed: int) -> pa.Table:
    """n CallEvent rows of one day, as the stream's table stores them."""
    start = datetime.combine(day, datetime.min.time(), UTC)
    times = [start + timedelta(milliseconds=(seed * 997 + i * 13) % 86_000_000) for i in range(n)]
    return pa.table(
        {
            "call_sid": [f"CA{seed:012d}{i:020d}" for i in range(n)],
            "account_sid": [f"AC{i % 500:032d}" for i in range(n)],
            "duration": [(i * 7) % 3600 for i in range(n)],
            "call_state": ["COMPLETED"] * n,
            "region": ["US_EAST"] * n,
            "event_time": times,
            "date": [day] * n,
            "kafka_topic": [CALL_EVENTS.topic] * n,
            "kafka_partition": [i % 6 for i in range(n)],
            "kafka_offset": [seed * n + i for i in range(n)],
            "kafka_timestamp": times,
            "ingest_time": times,
        },
        schema=contract_schema(CALL_EVENTS),
    )


class LogWriter:
    """Writes log entries into a table's `_delta_log` as the stream creates them
    (log_append.put_entry), in parallel on S3; on local disk dated as `Entry.at_s` says."""

    def __init__(self, uri: str, local: bool):
        self.uri = uri
        self.fs, root = filesystem(uri)
        self.log = f"{root}/_delta_log"
        self.local = local
        self.pool = ThreadPoolExecutor(1 if local else 16)

    def write(self, entries: list[Entry]) -> None:
        list(self.pool.map(self._put, entries))

    def _put(self, entry: Entry) -> None:
        if not log_append.put_entry(self.uri, entry.version, entry_bytes(entry.lines)):
            raise RuntimeError(f"{self.uri} has a version {entry.version} already")
        self.age(f"{entry.version:020d}.json", entry.at_s)

    def delete(self, name: str) -> None:
        self.fs.delete_file(f"{self.log}/{name}")

    def age(self, name: str, at_s: float) -> None:
        if self.local:
            os.utime(f"{self.log}/{name}", (at_s, at_s))

    def names(self) -> list[str]:
        from pyarrow.fs import FileSelector

        return [i.base_name for i in self.fs.get_file_info(FileSelector(self.log))]


def entry_bytes(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def stream_entry(files: list[DataFile], batch: int, at_s: float, app_id: str = APP_ID) -> list[str]:
    """A micro-batch's log entry as the stream writes it (log_append.append_entry): commitInfo,
    the application transaction, one add per file."""
    entry = log_append.append_entry(files, ["date"], app_id, batch, int(at_s * 1000))
    return entry.decode().splitlines()


def add_line(path: str, day: date, at_s: float, size: int, stats: str, data_change: bool) -> str:
    """An add action as the stream writes it; a compaction's (data_change False) differs in that
    flag alone."""
    file = DataFile(path, size, {"date": day.isoformat()}, int(at_s * 1000), 0, stats)
    action = json.loads(stream_entry([file], 0, at_s)[-1])
    action["add"]["dataChange"] = data_change
    return json.dumps(action, separators=(",", ":"))


def remove_line(path: str, day: date, at_s: float, size: int) -> str:
    """The remove action of a file the stream added (its path as the stream's add names it),
    deleted at at_s as a compaction writes it: the stream never removes, so log_append has no
    remove of its own."""
    added = json.loads(add_line(path, day, at_s, size, "{}", False))["add"]
    return json.dumps(
        {
            "remove": {
                "path": added["path"],
                "deletionTimestamp": int(at_s * 1000),
                "dataChange": False,
                "extendedFileMetadata": True,
                "partitionValues": added["partitionValues"],
                "size": added["size"],
            }
        },
        separators=(",", ":"),
    )


def compaction_info_line(at_s: float) -> str:
    """The commitInfo of a compaction (delta-rs's OPTIMIZE, which the maintenance assets run)."""
    return json.dumps(
        {
            "commitInfo": {
                "timestamp": int(at_s * 1000),
                "operation": "OPTIMIZE",
                "operationParameters": {},
                "clientVersion": "delta-rs.py-1.6.3",
                "isBlindAppend": False,
            }
        }
    )


def _stream_file(batch: int, day: date) -> str:
    return (
        f"date={day.isoformat()}/part-batch-{batch}-{batch * 2654435761 % 2**32:08x}.zstd.parquet"
    )


class LogState:
    """A table's state as its checkpoint holds it: live files, tombstones, each app's txn."""

    def __init__(self) -> None:
        self.adds: dict[str, str] = {}
        self.removes: dict[str, tuple[float, str]] = {}  # path: (deleted at, action)
        self.txns: dict[str, str] = {}  # app id: its newest txn action

    def add(self, path: str, line: str) -> None:
        self.adds[path] = line
        self.removes.pop(path, None)

    def remove(self, path: str, at_s: float, line: str) -> None:
        self.adds.pop(path, None)
        self.removes[path] = (at_s, line)

    def lines(self, at_s: float, file_retention_s: int) -> list[str]:
        kept = [line for t, line in self.removes.values() if t > at_s - file_retention_s]
        return [*self.txns.values(), *self.adds.values(), *kept]


def write_checkpoint(
    uri: str, head: list[str], state: list[str], version: int, at_s: float, newest: bool
) -> float:
    """A checkpoint of `state` at `version` of the table, written by delta-rs: the state is
    committed to a scratch table that shares the table's protocol and metadata (its first entry),
    delta-rs checkpoints it, and the file is copied into the table's log at `version`."""
    started = time.perf_counter()
    fs, root = filesystem(uri)
    scratch = f"{root}-scratch-{version}"
    fs.create_dir(f"{scratch}/_delta_log", recursive=True)
    scratch_uri = uri + f"-scratch-{version}"
    commit_info = stream_entry([], 0, at_s)[0]
    for n, lines in enumerate((head, [commit_info, *state])):
        log_append.put_entry(scratch_uri, n, entry_bytes(lines))
    open_table(scratch_uri).create_checkpoint()
    target = f"{root}/_delta_log/{version:020d}.checkpoint.parquet"
    fs.copy_file(f"{scratch}/_delta_log/{1:020d}.checkpoint.parquet", target)
    if "://" not in uri:
        os.utime(target, (at_s, at_s))
    if newest:
        with fs.open_input_stream(f"{scratch}/_delta_log/_last_checkpoint") as stream:
            last = json.loads(stream.read())
        with fs.open_output_stream(f"{root}/_delta_log/_last_checkpoint") as out:
            out.write(json.dumps(last | {"version": version}).encode())
    fs.delete_dir(scratch)
    return time.perf_counter() - started


def seed_tombstones(uri: str, count: int, window_s: float, now_s: float) -> int:
    """Give a table a stream has just started on the tombstones that `count` compacted files
    leave in the last `window_s` (the file retention), deletion times spread evenly over it so
    that they leave the checkpoints as fast as a steady compaction adds new ones: the state of a
    stream's table on its 30th day as its checkpoints carry it. One empty commit after the
    table's entries (taken by name, racing the stream as another writer would), and a checkpoint
    at it with the table's state and the tombstones, which the stream's own checkpoints carry
    on from. Returns that version; refuses a table whose log was cut (its entries replayed from
    the first make its state)."""
    for _ in range(delta_commit.LOST_RACES_AT_MOST):
        actions, version = [], 0
        while (entry := log_append.read_entry(uri, version)) is not None:
            actions += entry
            version += 1
        if version == 0:  # the state is then more than the entries left
            raise click.ClickException(f"{uri} lacks its first log entry: seed a new table")
        empty = stream_entry([], version, now_s, app_id=SEED_APP_ID)
        if log_append.put_entry(uri, version, entry_bytes(empty)):
            break
    else:
        raise click.ClickException(f"{uri}: the stream took every version the seed tried")
    head = [json.dumps([a for a in actions if kind in a][-1]) for kind in ("protocol", "metaData")]
    state = LogState()
    for action in actions:
        if "add" in action:
            state.add(action["add"]["path"], json.dumps(action))
        elif "remove" in action:
            removed = action["remove"]
            state.remove(removed["path"], removed["deletionTimestamp"] / 1000, json.dumps(action))
        elif "txn" in action:
            state.txns[action["txn"]["appId"]] = json.dumps(action)
    yesterday = datetime.fromtimestamp(now_s, UTC).date() - timedelta(days=1)
    for n in range(count):
        path = f"date={yesterday.isoformat()}/part-seeded-{n:08d}.zstd.parquet"
        at_s = now_s - window_s * (n + 0.5) / count
        state.remove(path, at_s, remove_line(path, yesterday, at_s, SEEDED_FILE_SIZE))
    write_checkpoint(uri, head, state.lines(now_s, int(window_s)), version, now_s, newest=True)
    return version


SEEDED_FILE_SIZE = 40_000
"""Bytes a seeded tombstone names: a stream's small file at 6,000 events/s."""


def grow_aged_log(uri: str, shape: StreamShape, sample: DataFile, now_s: float) -> dict:
    """The table at uri as 30 days of a stream leave it (see the module docstring)."""
    started = time.perf_counter()
    local = "://" not in uri
    evolve_table(CALL_EVENTS, uri)  # version 0: created by tidelake, with its properties
    writer = LogWriter(uri, local)
    fs, root = filesystem(uri)
    with fs.open_input_stream(f"{root}/_delta_log/{0:020d}.json") as stream:
        head = [line for line in stream.read().decode().splitlines() if '"commitInfo"' not in line]
    today = datetime.fromtimestamp(now_s, UTC).date()
    midnight_s = datetime.combine(today, datetime.min.time(), UTC).timestamp()
    first_s = now_s - shape.days * DAY_S  # the stream's first batch
    window_start_s = now_s - shape.window_s
    period = 1 / shape.rate
    compacted_size = int(sample.size * shape.rate * DAY_S)

    def batch_at(at_s: float) -> int:
        return int((at_s - first_s) * shape.rate)

    def day_of(at_s: float) -> date:
        return datetime.fromtimestamp(at_s, UTC).date()

    def stream_file(batch: int) -> DataFile:
        at = first_s + batch * period
        day = day_of(at).isoformat()
        path = _stream_file(batch, day_of(at))
        return DataFile(path, sample.size, {"date": day}, int(at * 1000), 0, sample.stats)

    def stream_add(batch: int) -> tuple[str, str]:
        file = stream_file(batch)
        at, day = file.modification_time / 1000, date.fromisoformat(file.partition_values["date"])
        return file.path, add_line(file.path, day, at, file.size, file.stats, True)

    def compaction(day: date, at_s: float) -> tuple[list[str], list[tuple[str, str]]]:
        """What compacting a closed day does: its stream files removed, one file added."""
        day_start = datetime.combine(day, datetime.min.time(), UTC).timestamp()
        removed = [
            _stream_file(b, day)
            for b in range(batch_at(max(first_s, day_start)), batch_at(day_start + DAY_S))
        ]
        path = f"date={day.isoformat()}/part-compacted-{day.isoformat()}.zstd.parquet"
        return removed, [(path, add_line(path, day, at_s, compacted_size, sample.stats, False))]

    # the state that the 30 days before the window leave, checkpointed at version 1
    first_batch = batch_at(window_start_s)
    state = LogState()
    for n in range(shape.days, 0, -1):
        day = today - timedelta(days=n)
        compacted_at = midnight_s - (n - 1) * DAY_S + shape.compaction_delay_s
        if compacted_at >= window_start_s:
            break
        removed, added = compaction(day, compacted_at)
        if compacted_at > now_s - shape.file_retention_s:  # its tombstones still kept
            for path in removed:
                state.remove(path, compacted_at, remove_line(path, day, compacted_at, sample.size))
        for path, line in added:
            state.add(path, line)
    last_compacted = max((d for d in (today - timedelta(days=n) for n in range(1, shape.days + 1))
                          if midnight_s - (today - d).days * DAY_S + DAY_S
                          + shape.compaction_delay_s < window_start_s), default=None)  # fmt: skip
    uncompacted_from = (
        first_s
        if last_compacted is None
        else datetime.combine(last_compacted, datetime.min.time(), UTC).timestamp() + DAY_S
    )
    for batch in range(batch_at(max(first_s, uncompacted_from)), first_batch):
        state.add(*stream_add(batch))
    state.txns[APP_ID] = stream_entry([], first_batch - 1, window_start_s - period)[1]
    history_actions = len(state.adds) + len(state.removes)
    checkpoint_s = [
        write_checkpoint(uri, head, state.lines(window_start_s, shape.file_retention_s), 1,
                         window_start_s - period, newest=True)
    ]  # fmt: skip
    writer.delete(f"{0:020d}.json")  # cleaned up long ago
    base_s = time.perf_counter() - started

    # the retained window, entry by entry, with the compaction of the day that closed in it;
    # checkpoints where the cleanup needs one (the first past the retention's cut-off) and the
    # newest, where the stream writes them: every delta.checkpointInterval-th version
    checkpoint_at = [now_s - shape.retention_s - shape.upkeep_s / 2]
    newest_from_s = now_s - (DELTA_CHECKPOINT_INTERVAL + 2) / shape.rate
    entries: list[Entry] = []
    batch, at = first_batch, first_s + first_batch * period
    compactions = [  # (when, day) of the days compacted inside the window
        (midnight_s - (n - 1) * DAY_S + shape.compaction_delay_s, today - timedelta(days=n))
        for n in range(shape.days, 0, -1)
        if window_start_s <= midnight_s - (n - 1) * DAY_S + shape.compaction_delay_s < now_s
    ]
    while at < now_s - period:
        if compactions and at >= compactions[0][0]:
            day = compactions.pop(0)[1]
            removed, added = compaction(day, at)
            lines = [compaction_info_line(at)]
            for path in removed:
                line = remove_line(path, day, at, sample.size)
                state.remove(path, at, line)
                lines.append(line)
            for path, line in added:
                state.add(path, line)
                lines.append(line)
            entries.append(Entry(at, lines, version=len(entries) + 2))
        file = stream_file(batch)
        lines = stream_entry([file], batch, at)
        _, state.txns[APP_ID], line = lines
        state.add(file.path, line)
        entries.append(Entry(at, lines, version=len(entries) + 2))
        version = entries[-1].version
        due = checkpoint_at and at >= checkpoint_at[0]
        if due or (at >= newest_from_s and version % DELTA_CHECKPOINT_INTERVAL == 0):
            if due:
                checkpoint_at.pop(0)
            checkpoint_s.append(
                write_checkpoint(uri, head, state.lines(at, shape.file_retention_s),
                                 version, at, newest=True)
            )  # fmt: skip
        batch += 1
        at += period
    writer.write(entries)
    writer.pool.shutdown()
    return {
        "history_actions": history_actions,
        "checkpoint_actions": len(state.lines(now_s, shape.file_retention_s)),
        "window_entries": len(entries),
        "log_files": len(writer.names()),
        "last_batch": batch - 1,
        "version": len(entries) + 1,
        "base_s": base_s,
        "build_s": time.perf_counter() - started,
        "checkpoints_written_s": checkpoint_s,
    }


def time_commits(
    tables: dict[str, tuple[str, int]],
    commits: int,
    commit: Callable[[str, list[DataFile], int], None],
) -> dict[str, dict]:
    """Times `commits` commits of one small real file each on every table (name -> uri and its
    first batch), in turns, so that each table's commits see the same load on the machine; the
    first (opening the table) apart."""
    day = datetime.now(UTC).date()
    times: dict[str, list[float]] = {name: [] for name in tables}
    for n in range(commits + 1):
        for name, (uri, first_batch) in tables.items():
            files = write_arrow_files(stream_rows(20, day, first_batch + n), uri, "date", f"b{n}")
            started = time.perf_counter()
            commit(uri, files, first_batch + n)
            times[name].append(time.perf_counter() - started)
    return {name: _commit_figures(t, commits) for name, t in times.items()}


def _commit_figures(times: list[float], commits: int) -> dict:
    steady = sorted(times[1:])
    return {
        "open_and_first_ms": times[0] * 1000,
        "median_ms": statistics.median(steady) * 1000,
        "p95_ms": steady[int(len(steady) * 0.95) - 1] * 1000,
        "max_ms": steady[-1] * 1000,
        "commits": commits,
    }


def stream_commit(uri: str, files: list[DataFile], batch: int) -> None:
    """What a micro-batch does with the table (delta/write.py): asks whether the batch is
    recorded already (a replay), then commits it."""
    if batch_recorded(uri, APP_ID, batch):
        raise RuntimeError(f"batch {batch} is recorded already: the probe's batches are new")
    commit_files(
        uri, files, schema=contract_schema(CALL_EVENTS), partition_by=["date"],
        app_id=APP_ID, version=batch,
    )  # fmt: skip


_before_tables: dict[str, object] = {}


def before_commit(uri: str, files: list[DataFile], batch: int) -> None:
    """The commit path before issue 38: the table kept open with its file list, delta-rs's
    default post-commit hooks (checkpoint every delta.checkpointInterval commits, expired-log
    cleanup on every commit), an incremental update before and after."""
    table = _before_tables.get(uri)
    if table is None:
        table = _before_tables[uri] = open_table(uri)
    table.update_incremental()
    assert (table.transaction_version(APP_ID) or -1) < batch
    table.create_write_transaction(
        [AddAction(f.path, f.size, f.partition_values, f.modification_time, True, f.stats)
         for f in files],
        "append", contract_schema(CALL_EVENTS), ["date"],
        commit_properties=CommitProperties(
            app_transactions=[Transaction(APP_ID, batch, int(time.time() * 1000))]
        ),
    )  # fmt: skip
    table.update_incremental()


def measure_store(
    name: str, lake: str, shape: StreamShape, commits: int, before_commits: int
) -> dict:
    new_uri, aged_uri = f"{lake}/new/call_events", f"{lake}/aged/call_events"
    sample = write_arrow_files(
        stream_rows(int(6000 * 1 / shape.rate), date.today(), 0), f"{lake}/sample", "date", "s"
    )[0]
    click.echo(f"[{name}] growing the 30-day log ...", err=True)
    aged = grow_aged_log(aged_uri, shape, sample, time.time())
    click.echo(f"[{name}] {aged['log_files']:,} log files in {aged['build_s']:.0f} s; "
               f"timing {commits} commits on each table ...", err=True)  # fmt: skip
    evolve_table(CALL_EVENTS, new_uri)
    result = {
        "aged_log": aged,
        **time_commits(
            {"new": (new_uri, 0), "aged": (aged_uri, aged["last_batch"] + 1)},
            commits,
            stream_commit,
        ),
    }
    upkeep = upkeep_log(aged_uri)
    result["upkeep"] = {
        "checkpoint_s": upkeep.checkpoint_seconds,
        "cleanup_s": upkeep.cleanup_seconds,
        "entries_before": upkeep.entries_before,
        "entries_after": upkeep.entries_after,
    }
    oldest = min(snapshot_progress(open_table(aged_uri), "date").files_by_date)
    started = time.perf_counter()
    expired = expire_dates(aged_uri, "date", date.fromisoformat(oldest) + timedelta(days=1))
    result["expiry"] = {
        "seconds": time.perf_counter() - started,
        "dates": list(expired.dates),
        "files": expired.removed_files,
    }
    if before_commits:
        delta_commit._open_tables.clear()
        before = time_commits(
            {
                "new": (new_uri, commits + 1),
                "aged": (aged_uri, aged["last_batch"] + commits + 2),
            },
            before_commits,
            before_commit,
        )
        result["before_new"], result["before_aged"] = before["new"], before["aged"]
    return result


def report(name: str, f: dict) -> None:
    """Print one store's figures."""
    a, n, u = f["aged"], f["new"], f["upkeep"]
    log_ = f["aged_log"]
    click.echo(
        f"[{name}] 30-day log: {log_['log_files']:,} files in _delta_log, "
        f"{log_['history_actions']:,} actions in its state; grown in {log_['build_s']:.0f} s"
    )
    click.echo(
        f"[{name}] commit, new table      median {n['median_ms']:7.1f} ms   "
        f"p95 {n['p95_ms']:7.1f} ms   open+first {n['open_and_first_ms']:7.0f} ms"
    )
    click.echo(
        f"[{name}] commit, 30-day table   median {a['median_ms']:7.1f} ms   "
        f"p95 {a['p95_ms']:7.1f} ms   open+first {a['open_and_first_ms']:7.0f} ms"
    )
    click.echo(
        f"[{name}] ratio aged/new         median {a['median_ms'] / n['median_ms']:.2f}x"
        f"   p95 {a['p95_ms'] / n['p95_ms']:.2f}x   (target <= 1.2x)"
    )
    click.echo(
        f"[{name}] log upkeep on the 30-day log: checkpoint {u['checkpoint_s']:.1f} s, "
        f"cleanup {u['cleanup_s']:.1f} s ({u['entries_before']:,} -> "
        f"{u['entries_after']:,} log files)"
    )
    e = f["expiry"]
    click.echo(
        f"[{name}] expiry of the oldest date on the 30-day table: {e['seconds']:.1f} s "
        f"({', '.join(e['dates'])}: {e['files']} files)"
    )
    if "before_aged" in f:
        b, bn = f["before_aged"], f["before_new"]
        click.echo(f"[{name}] before issue 38: new median {bn['median_ms']:.1f} ms, 30-day "
                   f"median {b['median_ms']:.1f} ms p95 {b['p95_ms']:.1f} ms "
                   f"({b['median_ms'] / bn['median_ms']:.1f}x)")  # fmt: skip


@click.command()
@click.option(
    "--store", type=click.Choice(["local", "s3", "both"]), default="both", show_default=True
)
@click.option("--commits", default=200, show_default=True, help="timed commits on each table")
@click.option(
    "--before-commits",
    default=0,
    show_default=True,
    help="also time this many commits the way they were made before issue 38",
)
@click.option(
    "--rate",
    default=1.0,
    show_default=True,
    help="the stream's commits a second (1 at the default trigger when busy)",
)
@click.option("--days", default=30, show_default=True, help="the stream's age")
@click.option(
    "--retention",
    default=None,
    help="log retention, e.g. '24 hours' [default: TIDELAKE_DELTA_LOG_RETENTION]",
)
@click.option("--upkeep", default="1 hour", show_default=True, help="the log upkeep's period")
@click.option(
    "--file-retention",
    default=None,
    help="delta.deletedFileRetentionDuration: the tombstones checkpoints carry "
    "[default: as tidelake sets it, the log retention]",
)
@click.option("--out", type=click.Path(path_type=Path))
def main(
    store: str, commits: int, before_commits: int, rate: float, days: int,
    retention: str | None, upkeep: str, file_retention: str | None,
    out: Path | None,
) -> None:  # fmt: skip
    retention = retention or EngineSettings().delta_log_retention
    file_retention = file_retention or retention
    os.environ["TIDELAKE_DELTA_LOG_RETENTION"] = retention  # the tables carry it
    shape = StreamShape(
        rate, days, duration_s(retention), duration_s(upkeep), duration_s(file_retention),
    )  # fmt: skip
    figures: dict = {"shape": shape.__dict__ | {"retention": retention}}
    stores = ["local", "s3"] if store == "both" else [store]
    click.echo(
        f"stream: {rate:g} commits/s for {days} days; log retention {retention}, upkeep every "
        f"{upkeep}, tombstones kept {file_retention}; today's files up to "
        f"{datetime.now(UTC):%H:%M} UTC uncompacted"
    )
    with tempfile.TemporaryDirectory(prefix="tidelake-bench-log-") as tmp:
        for name in stores:
            with lake_env(name, Path(tmp) / name) as env:
                os.environ.update(env)  # this process reads and writes the tables
                lake = env["TIDELAKE_LAKE"]
                figures[name] = measure_store(name, lake, shape, commits, before_commits)
            report(name, figures[name])
            write_figures(out, figures)
            click.echo(f"[{name}] removing the tables ...", err=True)
    write_figures(out, figures)


if __name__ == "__main__":
    main()
