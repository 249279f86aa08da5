"""A finished soak's verdict: what was produced against what the tables hold, the faults'
recoveries, the drift of every series and each storage series' growth per day."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from common import drift

from soak.faults import FaultRecord
from soak.figures import print_drift
from soak.series import SERIES_AGE

DAY_S = 86_400.0


def summarize(
    rows: list[dict[str, float]],
    faults: list[FaultRecord],
    produced: dict[str, Any],
    counts: dict[str, int],
    caught_up: bool,
    settle_s: float,
    minutes: float,
    rate: float,
) -> dict[str, Any]:
    good, malformed = produced["good"], produced["malformed"]
    return {
        "minutes": minutes,
        "rate": rate,
        "produced": {k: v for k, v in produced.items() if k != "keys"},
        "read_back": counts,
        "caught_up": caught_up,
        "lost": max(0, good - counts["distinct_keys"]),
        "duplicated": counts["rows"] - counts["distinct_keys"],
        "unexpected_rows": max(0, counts["distinct_keys"] - good),
        "quarantine_mismatch": counts["quarantined"] - malformed,
        "faults": [asdict(f) for f in faults],
        "drift": drift(rows, settle_s, minutes * 60, SERIES_AGE),
        "per_day": per_day(rows, minutes * 60),
    }


def per_day(rows: list[dict[str, float]], run_s: float) -> dict[str, float]:
    """Growth of each storage series over the run, scaled to a day."""
    if len(rows) < 2:
        return {}
    first, last = rows[0], rows[-1]
    span = last["t_s"] - first["t_s"]
    names = [k for k in last if k.endswith(("_files", "_mb")) and k in first]
    return {n: (last[n] - first[n]) * DAY_S / span for n in names}


def print_summary(summary: dict[str, Any]) -> None:
    print(
        f"\nproduced {summary['produced']['produced']:,} ({summary['produced']['good']:,} good, "
        f"{summary['produced']['malformed']:,} malformed, {summary['produced']['duplicates']:,} "
        f"repeats); read back {summary['read_back']['rows']:,} rows, "
        f"{summary['read_back']['distinct_keys']:,} keys, {summary['read_back']['quarantined']:,} "
        f"quarantined: lost {summary['lost']}, duplicated {summary['duplicated']}, "
        f"quarantine off by {summary['quarantine_mismatch']}, caught up: {summary['caught_up']}"
    )
    for f in summary["faults"]:
        print(
            f"fault {f['name']} at {f['at_s'] / 60:.1f} min: {f['detail']}; first batch after "
            f"{f['first_batch_after_s']} s, caught up after {f['caught_up_after_s']} s"
        )
    print()
    print_drift(summary["drift"])
    print("\nthe stream JVM's ungrouped threads, CPU seconds over the run:")
    for name, seconds in summary.get("stream_jvm_other_threads_cpu_s", {}).items():
        print(f"  {name:28} {seconds:12.1f}")
    print("\nthe stream's Python driver's threads at the last sample:")
    for name, count in summary.get("stream_python_threads", {}).items():
        print(f"  {name:28} {count:12d}")
    print("\ngrowth per day (from the run's first to last sample):")
    for name, value in sorted(summary["per_day"].items()):
        print(f"  {name:28} {value:12.1f}")
