"""tidelake's own errors as Dagster step failures: the one place they are mapped for Dagster (the
command line's is platform/cli.py's _clean_errors)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from tidelake.streaming.errors import TidelakeError


@contextmanager
def step_failure() -> Iterator[None]:
    """A TidelakeError fails the step with its message as the description (what to fix, shown
    first in the UI), its cause kept; any other error is a bug and keeps its own traceback."""
    try:
        yield
    except TidelakeError as exc:
        raise dg.Failure(description=str(exc)) from exc
