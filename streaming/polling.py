"""Waiting for a condition: the one polling loop of tidelake's code (a server coming up, a topic
growing, a webserver answering), on tenacity."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import tenacity

T = TypeVar("T")


def poll_until(
    probe: Callable[[], T | None],
    *,
    timeout_s: float,
    interval_s: float,
    timeout_error: Callable[[str], Exception],
    not_yet: tuple[type[Exception], ...] = (),
) -> T:
    """Call probe every interval_s until it returns something other than None, and return that.

    An exception of a `not_yet` type counts as "not yet" (a connection refused while a server
    starts); any other is raised at once (a server that exited will not come up later). After
    timeout_s, raises timeout_error(the last not-yet exception's text, or "").
    """

    def give_up(state: tenacity.RetryCallState) -> T:
        outcome = state.outcome
        last = outcome.exception() if outcome is not None and outcome.failed else None
        raise timeout_error(str(last) if last is not None else "")

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(interval_s),
        retry=tenacity.retry_if_result(lambda value: value is None)
        | tenacity.retry_if_exception_type(not_yet),
        retry_error_callback=give_up,
    )
    value = retrying(probe)
    assert value is not None  # give_up raises
    return value
