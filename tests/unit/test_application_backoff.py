"""The back-off of a query that fails in a flow's application (stream/application.py)."""

from tidelake.streaming.stream.backoff import Backoff


def test_each_failure_in_a_row_doubles_the_wait_up_to_its_cap() -> None:
    backoff = Backoff(first_s=5.0, max_s=60.0)
    assert [backoff.delay(n) for n in range(1, 7)] == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]
    assert Backoff().delay(100) == Backoff().max_s  # no overflow after a long crash loop
