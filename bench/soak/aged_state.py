"""`--aged`: the table and the quarantine seeded, before they are fed, with the tombstones a
stream's 30th day carries."""

from __future__ import annotations

import time

from delta_log_age import duration_s, seed_tombstones

from soak.platform import Soak
from tidelake.streaming.settings import EngineSettings

AGED_FILES_PER_HOUR = {"table": 14_000, "quarantine": 6_500}
"""The stream's small files an hour that the hourly compaction turns into tombstones, at 6,000
events/s and the default trigger (the twelfth soak): `--aged` seeds a file retention of them."""


def seed_aged_state(soak: Soak) -> dict[str, int]:
    """The tombstones the table and the quarantine carry on a stream's 30th day (a file retention
    of hourly compactions), seeded once the stream has created them and before it is fed, so
    that their checkpoints cost what they cost in a month, not in a stream's first hour."""
    retention_s = duration_s(EngineSettings().delta_log_retention)
    now_s = time.time()
    seeded = {}
    for name, table in (("table", soak.table), ("quarantine", soak.quarantine)):
        count = int(AGED_FILES_PER_HOUR[name] * retention_s / 3600)
        seed_tombstones(str(table), count, retention_s, now_s)
        seeded[name] = count
    return seeded
