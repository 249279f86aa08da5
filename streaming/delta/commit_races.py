"""A Delta commit that lost a race (delta-rs's CommitFailedError: another writer committed a
conflicting change first) is tried again on the table's new snapshot. One rule for every writer
of tidelake that commits through delta-rs: rows appended once, a backfill's overwrite, a
compaction. A stream's batch, appended by name, reads the versions it lost to instead
(delta/log_append.py)."""

from __future__ import annotations

import logging

import tenacity
from deltalake.exceptions import CommitFailedError

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 5


def retry_lost_commits(what: str, attempts: int = COMMIT_ATTEMPTS) -> tenacity.Retrying:
    """Attempts at `what` (named in the log) while its commit loses races: up to `attempts`,
    0.1-1 s apart at random (two writers that collided do not collide again in step), each
    loss logged as a warning, the last one's CommitFailedError raised as it is.

        for attempt in retry_lost_commits(f"{uri}: batch {version}"):
            with attempt:
                ...  # read the latest snapshot, then commit
    """
    return tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=tenacity.wait_random(0.1, 1.0),
        retry=tenacity.retry_if_exception_type(CommitFailedError),
        before_sleep=lambda state: log.warning(
            "%s lost a commit race (attempt %s of %s: %s); trying again on the new snapshot",
            what,
            state.attempt_number,
            attempts,
            state.outcome.exception() if state.outcome else "",
        ),
        reraise=True,
    )
