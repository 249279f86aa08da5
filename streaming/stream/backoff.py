"""How long a failed stream waits before its next start: the one doubling rule of a query in a
flow's application (application.py) and of the Dagster supervisor's runs
(assets/stream/supervisor_decision.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """`first_s` after the first failure in a row, doubled on each further one up to `max_s`; a
    query that ran `healthy_after_s` before failing starts the count again."""

    first_s: float = 5.0
    max_s: float = 300.0
    healthy_after_s: float = 300.0

    def delay(self, failures_in_a_row: int) -> float:
        return float(min(self.max_s, self.first_s * 2.0 ** max(0, failures_in_a_row - 1)))
