"""How many threads delta-rs's runtime keeps in a process that reads a Delta log (issue 38).

A stream's driver reads its table's log with delta-rs only to checkpoint it (delta/commit.py):
the commits since the last checkpoint, `delta.checkpointInterval` of them, are read at once on
tokio's blocking pool (local disk), which starts a thread for each read no idle thread takes and
ends one only after 10 s without work. A stream checkpoints every few tens of seconds, so the pool
keeps the largest burst it has seen. This reproduces that pattern outside a stream: another
process appends `--commits` commits, this one brings a snapshot without files up to date every
`--read-every` of them and checkpoints at the end of each round, and it prints the number of
`tokio-rt-worker` threads and the process's RSS after each round.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import click
import psutil
from common import thread_names
from deltalake import DeltaTable

_APPENDS = """
import sys
import pyarrow as pa
from deltalake import write_deltalake
from deltalake.transaction import PostCommitHookProperties
hooks = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
row = pa.table({"a": [1]})
for _ in range(int(sys.argv[2])):
    write_deltalake(sys.argv[1], row, mode="append", post_commithook_properties=hooks)
"""


def runtime_threads() -> int:
    """This process's threads of delta-rs's tokio runtime (its workers and blocking pool)."""
    return thread_names()["tokio-rt-worker"]


def append(table: str, commits: int) -> None:
    """`commits` one-row appends from another process, as the stream's commits come from the
    log append rather than from this process's runtime."""
    subprocess.run([sys.executable, "-c", _APPENDS, table, str(commits)], check=True)


@click.command()
@click.option("--commits", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--read-every", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
def main(commits: int, read_every: int, rounds: int) -> None:
    work = tempfile.mkdtemp(prefix="tidelake-read-threads-")
    try:
        table = os.path.join(work, "t")
        append(table, 1)
        snapshot = DeltaTable(table, without_files=True)
        print(f"{commits} commits a round, read every {read_every}, checkpointed each round")
        for round_ in range(rounds):
            peak = 0
            for done in range(0, commits, read_every):
                append(table, min(read_every, commits - done))
                snapshot.update_incremental()
                peak = max(peak, runtime_threads())
            snapshot.create_checkpoint()
            rss_mb = psutil.Process().memory_info().rss / 2**20
            print(
                f"round {round_ + 1}: version {snapshot.version()}, runtime threads {peak} after "
                f"the reads, {runtime_threads()} after the checkpoint, RSS {rss_mb:.0f} MB"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
