"""A use case's full refresh, after its function changed: its table and its query's checkpoint
are deleted, and its next start builds the table anew from its whole input (Delta's streaming
source begins with the input's snapshot, then follows its commits)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from tidelake.streaming.errors import TidelakeError
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.storage.location import Location
from tidelake.streaming.usecase.spec import UseCaseSpec

QUIET_BEFORE_REFRESH_S = 120.0
"""A checkpoint written to within this long belongs to a query that may still run."""


class UseCaseRunningError(TidelakeError, RuntimeError):
    """The use case's query committed a batch moments ago: deleting its table under it would
    leave a table of half the input. Stop it first."""


@dataclass(frozen=True)
class Refreshed:
    table_uri: str
    checkpoint: str


def refresh_use_case(
    use_case: UseCaseSpec, settings: EngineSettings, *, force: bool = False, now_s: float = 0.0
) -> Refreshed:
    """Delete the use case's table and checkpoint; refused (UseCaseRunningError) when its
    checkpoint was written within QUIET_BEFORE_REFRESH_S, unless `force`."""
    table = Location(settings.table_uri(use_case.table))
    checkpoint = Location(settings.checkpoint_uri(use_case.checkpoint_name))
    commits = checkpoint / "commits"
    done = [int(n) for n in commits.names() if n.isdigit()] if commits.exists() else []
    if not force and done:
        last = (commits / str(max(done))).modified_at().timestamp()
        quiet = (now_s or time.time()) - last
        if quiet < QUIET_BEFORE_REFRESH_S:
            raise UseCaseRunningError(
                f"use case {use_case.name}: its query committed {quiet:.0f} s ago; stop it "
                f"first (its supervisor sensor, then its run, or `tidelake stream "
                f"{use_case.name}`), or pass --force"
            )
    table.delete_tree()
    checkpoint.delete_tree()
    return Refreshed(str(table), str(checkpoint))
