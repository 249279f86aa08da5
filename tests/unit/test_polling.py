"""poll_until: what it returns, what counts as "not yet", what it raises and when."""

from __future__ import annotations

import pytest

from tidelake.streaming.polling import poll_until


class Late(Exception):
    pass


def test_returns_the_first_value_that_is_not_none() -> None:
    answers = iter([None, None, "up"])
    value = poll_until(
        lambda: next(answers), timeout_s=60, interval_s=0, timeout_error=RuntimeError
    )
    assert value == "up"


def test_a_not_yet_exception_is_retried_and_named_at_the_timeout() -> None:
    calls = []

    def refused() -> None:
        calls.append(1)
        raise Late(f"connection refused ({len(calls)})")

    with pytest.raises(TimeoutError, match=r"never up: connection refused \(\d+\)"):
        poll_until(
            refused,
            timeout_s=0.05,
            interval_s=0.01,
            timeout_error=lambda last: TimeoutError(f"never up: {last}"),
            not_yet=(Late,),
        )
    assert len(calls) >= 2


def test_any_other_exception_ends_the_wait_at_once() -> None:
    calls = []

    def exited() -> None:
        calls.append(1)
        raise ValueError("the server exited with code 1")

    with pytest.raises(ValueError, match="exited"):
        poll_until(exited, timeout_s=60, interval_s=0, timeout_error=RuntimeError, not_yet=(Late,))
    assert calls == [1]


def test_a_timeout_without_an_exception_says_nothing_more() -> None:
    with pytest.raises(TimeoutError, match=r"^waited$"):
        poll_until(
            lambda: None,
            timeout_s=0.02,
            interval_s=0.01,
            timeout_error=lambda last: TimeoutError(f"waited{last}"),
        )
