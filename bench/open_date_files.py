"""What a date's small files cost until they are compacted (issue 38): the stream's checkpoint,
a reader's snapshot, a read of the date.

A stream writes one or two files a micro-batch (one per task that wrote rows) into the open date
of its table and, for a batch with a refused record, one into its quarantine: at 6,000 events/s
and the default trigger, ~14,000 table files an hour and ~6,500 quarantine files (the twelfth
soak). Each compaction turns the files it rewrites into tombstones, which every checkpoint
carries for `delta.deletedFileRetentionDuration` (24 hours, as tidelake sets it).

The probe grows a call_events table's state directly to the shape a stream leaves at a chosen
hour of its day, checkpoints it with delta-rs, and times what reads it:
- the stream's own checkpoint (every `delta.checkpointInterval` commits, streamed from the last
  one on its file-less snapshot, `streaming/delta/commit.py`),
- a reader's snapshot with its file list and the per-date figures (`open_table` and
  `snapshot_progress`, as compaction, the quality checks and the supervisor read it),
- a count of the open date's rows through pyarrow's dataset, which opens every file's footer.
The data files are hard links to one real 6,000-row file, so readers open real files.

Shapes (`--files-per-hour` F, the default the table's rate above):
- `daily`: compaction once a date closes, as before issue 38's intraday compaction: at hour H the
  open date holds H*F live files, yesterday's 24*F are tombstones;
- `hourly`: the open date compacted every hour as well: at most F small files live, the day's
  compacted files, and the tombstones of the last 24 hours;
- `quarantine`: a quarantine never compacted, D days old: D*24*F live files.

    python bench/open_date_files.py --shape daily --hours 6 --hours 23 --shape hourly ...
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import click
import psutil
from common import write_figures
from delta_log_age import Entry, LogWriter, add_line, remove_line, stream_entry, stream_rows
from delta_log_age import write_checkpoint as write_state_checkpoint

from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.delta.evolution import evolve_table
from tidelake.streaming.delta.files import write_arrow_files
from tidelake.streaming.delta.tables import open_table

LINKS_PER_COPY = 60_000  # ext4 allows 65,000 links to a file
COMPACTED_FILE_ROWS = 5_000_000  # a 128 MB file of CallEvents holds about this many
ROWS_PER_HOUR = 6_000 * 3_600  # the compacted files of the `hourly` shape follow 6,000 events/s


def grow_state(uri: str, live_small: int, live_compacted: int, tombstones: int, day: date) -> None:
    """The table at uri with `live_small` stream files and `live_compacted` compacted files in
    `day`, and `tombstones` files of the day before removed within the file retention; all data
    files are links to one real file, whose statistics every add carries."""
    evolve_table(CALL_EVENTS, uri)
    (sample,) = write_arrow_files(stream_rows(6_000, day, 0), uri, "date", "sample")
    folder = Path(uri) / f"date={day.isoformat()}"
    source = Path(uri) / sample.path
    now_s = time.time()
    lines = stream_entry([], 0, now_s)[:1]
    for n in range(live_small + live_compacted):
        path = f"date={day.isoformat()}/part-{n:08d}.zstd.parquet"
        if n % LINKS_PER_COPY == 0:  # a file system allows so many links to one file
            shutil.copyfile(source, copy := folder / f"sample-{n}.parquet")
        os.link(copy, folder / Path(path).name)
        lines.append(add_line(path, day, now_s, sample.size, sample.stats, n < live_small))
    yesterday = day - timedelta(days=1)
    for n in range(tombstones):
        path = f"date={yesterday.isoformat()}/part-{n:08d}.zstd.parquet"
        lines.append(remove_line(path, yesterday, now_s - 3600, sample.size))
    log = LogWriter(uri, local=True)
    head = Path(uri, "_delta_log", f"{0:020d}.json").read_text().splitlines()
    head = [line for line in head if '"commitInfo"' not in line]
    log.write([Entry(now_s, lines, version=1)])
    write_state_checkpoint(uri, head, lines[1:], 1, now_s, newest=True)
    log.pool.shutdown()
    source.unlink()


READER = """
import json, sys, time
from tidelake.streaming.delta.progress import snapshot_progress
from tidelake.streaming.delta.tables import open_table
what, uri, day = sys.argv[1:]
started = time.perf_counter()
if what == "checkpoint_s":
    open_table(uri, without_files=True).create_checkpoint()
elif what == "snapshot_s":
    snapshot_progress(open_table(uri), "date")
else:
    open_table(uri).to_pyarrow_dataset(partitions=[("date", "=", day)]).count_rows()
print(json.dumps({"s": time.perf_counter() - started}))
"""
"""One reader, in a process of its own as a reader's would be (its RSS sampled from outside:
Linux carries a process's peak RSS across exec, so the child's own figure is its parent's)."""

READERS = ("checkpoint_s", "snapshot_s", "count_date_s")


def time_readers(
    uri: str, day: date, repeats: int, limit_s: float, limit_mb: float
) -> dict[str, float | str]:
    """Median seconds and peak RSS of the stream's checkpoint, a reader's snapshot, and a count
    of the day, each read in a new process; a read stopped at `limit_s` or `limit_mb` is
    reported as such. Each checkpoint follows a commit of one more file, as the stream's follows
    its batch."""
    figures: dict[str, list[dict]] = {name: [] for name in READERS}
    log = LogWriter(uri, local=True)
    for n in range(repeats):
        now_s = time.time()
        path = f"date={day.isoformat()}/part-{0:08d}.zstd.parquet"  # a link to the sample
        extra = f"date={day.isoformat()}/part-extra-{n}.zstd.parquet"
        os.link(Path(uri) / path, Path(uri) / extra)
        version = open_table(uri, without_files=True).version() + 1
        add = _first_add(uri)
        log.write([Entry(now_s, [stream_entry([], version, now_s)[0],
                                 add.replace(path, extra)], version=version)])  # fmt: skip
        for name in READERS:
            figures[name].append(_read(name, uri, day, limit_s, limit_mb))
    log.pool.shutdown()
    result: dict[str, float | str] = {}
    for name, reads in figures.items():
        stopped = [r["stopped"] for r in reads if "stopped" in r]
        if stopped:
            result[name] = stopped[0]
            continue
        result[name] = round(statistics.median(r["s"] for r in reads), 3)
        result[name.removesuffix("_s") + "_peak_mb"] = round(max(r["peak_mb"] for r in reads))
    return result


def _read(name: str, uri: str, day: date, limit_s: float, limit_mb: float) -> dict:
    """READER in a child process, stopped past limit_s seconds or limit_mb of RSS."""
    child = subprocess.Popen(
        [sys.executable, "-c", READER, name, uri, day.isoformat()], stdout=subprocess.PIPE
    )
    watched = psutil.Process(child.pid)
    started = time.monotonic()
    peak_mb = 0.0
    while child.poll() is None:
        try:
            rss_mb = watched.memory_info().rss / 2**20
        except psutil.NoSuchProcess:
            break
        peak_mb = max(peak_mb, rss_mb)
        elapsed = time.monotonic() - started
        if rss_mb > limit_mb or elapsed > limit_s:
            child.kill()
            child.wait()
            return {"stopped": f"stopped at {rss_mb:,.0f} MB after {elapsed:.0f} s"}
        time.sleep(0.2)
    child.wait()
    assert child.stdout is not None
    if child.returncode:
        raise RuntimeError(f"{name} on {uri} failed with exit code {child.returncode}")
    return json.loads(child.stdout.read()) | {"peak_mb": peak_mb}


def _figure(figures: dict, name: str) -> str:
    value = figures[name]
    if isinstance(value, str):
        return f"{name.removesuffix('_s')} {value}"
    return f"{name.removesuffix('_s')} {value:.2f} s ({figures[name[:-2] + '_peak_mb']:,} MB)"


def _first_add(uri: str) -> str:
    """The add action of the table's first data file, as version 1 wrote it."""
    with open(Path(uri, "_delta_log", f"{1:020d}.json")) as entry:
        return next(line.rstrip("\n") for line in entry if line.startswith('{"add"'))


def shape_files(
    shape: str, hour: int, per_hour: int, quarantine_per_hour: int, days: int
) -> tuple[int, int, int]:
    """(live small files, live compacted files, tombstones) of a shape at an hour of the day."""
    day_files = 24 * per_hour
    if shape == "daily":
        return hour * per_hour, 0, day_files
    if shape == "hourly":
        return per_hour, -(-hour * ROWS_PER_HOUR // COMPACTED_FILE_ROWS), day_files
    return days * 24 * quarantine_per_hour, 0, 0


@click.command()
@click.option(
    "--shape", "shapes", multiple=True, type=click.Choice(["daily", "hourly", "quarantine"]),
    default=["daily", "hourly"], show_default=True,
)  # fmt: skip
@click.option("--hours", multiple=True, type=click.IntRange(1, 24), default=[23], show_default=True)
@click.option("--days", multiple=True, type=click.IntRange(1), default=[1], show_default=True,
              help="the quarantine's age")  # fmt: skip
@click.option("--files-per-hour", type=click.IntRange(1), default=14_000, show_default=True)
@click.option("--quarantine-files-per-hour", type=click.IntRange(1), default=6_500,
              show_default=True)  # fmt: skip
@click.option("--repeats", type=click.IntRange(1), default=3, show_default=True)
@click.option("--reader-limit-s", type=float, default=600, show_default=True,
              help="a read taking longer is stopped and reported so")  # fmt: skip
@click.option("--reader-limit-mb", type=float, default=8_000, show_default=True,
              help="a read holding more RSS is stopped and reported so")  # fmt: skip
@click.option("--out", type=click.Path(path_type=Path))
def main(
    shapes: tuple[str, ...], hours: tuple[int, ...], days: tuple[int, ...],
    files_per_hour: int, quarantine_files_per_hour: int, repeats: int,
    reader_limit_s: float, reader_limit_mb: float, out: Path | None,
) -> None:  # fmt: skip
    day = datetime.now(UTC).date()
    results = []
    runs = [(s, h, 0) for s in shapes if s != "quarantine" for h in hours]
    runs += [("quarantine", 24, d) for d in days if "quarantine" in shapes]
    with tempfile.TemporaryDirectory(prefix="tidelake-bench-open-date-") as tmp:
        for shape, hour, age in runs:
            small, compacted, tombstones = shape_files(
                shape, hour, files_per_hour, quarantine_files_per_hour, age
            )
            uri = str(Path(tmp) / f"{shape}-{hour}-{age}")
            started = time.perf_counter()
            grow_state(uri, small, compacted, tombstones, day)
            grown_s = time.perf_counter() - started
            figures = {
                "shape": shape, "hour": hour, "quarantine_days": age, "live_small": small,
                "live_compacted": compacted, "tombstones": tombstones,
                "grow_s": round(grown_s, 1),
                **time_readers(uri, day, repeats, reader_limit_s, reader_limit_mb),
            }  # fmt: skip
            results.append(figures)
            click.echo(
                f"{shape:>10} hour {hour:>2} days {age}: {small:>9,} small + {compacted:>3} "
                f"compacted live, {tombstones:>9,} tombstones | "
                + ", ".join(_figure(figures, name) for name in READERS)
            )
            per_hour = {"table": files_per_hour, "quarantine": quarantine_files_per_hour}
            limits = {"seconds": reader_limit_s, "mb": reader_limit_mb, "repeats": repeats}
            write_figures(out, {"files_per_hour": per_hour, "readers": limits, "runs": results})
            shutil.rmtree(uri)


if __name__ == "__main__":
    main()
