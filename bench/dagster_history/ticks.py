"""The supervisor's tick as the daemon runs it, timed on an instance."""

from __future__ import annotations

import statistics
import time
from typing import Any

import dagster as dg

# the tick's row as the daemon writes it: no public API writes a tick
from dagster._core.scheduler.instigation import InstigatorType, TickData, TickStatus

from .profiles import DAY_S, JOB, SENSOR


def time_ticks(
    instance: dg.DagsterInstance,
    defs: dg.Definitions,
    resources: dict[str, Any],
    origin_id: str,
    selector_id: str,
    retention: dict[str, int],
    ticks: int,
) -> dict[str, Any]:
    """The supervisor's tick as the daemon runs it: the sensor, then its events, its tick and the
    retention purge written; and the Dagster reads inside the sensor, timed apart."""
    from tidelake.assets.stream import health
    from tidelake.assets.stream.always_on import fail_if_stale

    sensor = defs.resolve_sensor_def(SENSOR)
    cursor = None
    evaluate, write, recorded = [], [], 0
    by_status: dict[int, list[TickStatus]] = {}
    for status in (TickStatus.SKIPPED, TickStatus.SUCCESS, TickStatus.FAILURE):
        days = retention.get(status.value.lower(), -1)
        if days > 0:
            by_status.setdefault(days, []).append(status)
    for _ in range(ticks):
        started = time.perf_counter()
        with dg.build_sensor_context(
            instance=instance, cursor=cursor, definitions=defs, resources=resources
        ) as context:
            result = sensor(context)
        evaluated = time.perf_counter()
        assert not result.run_requests, result.run_requests
        cursor = result.cursor
        tick = instance.create_tick(
            TickData(
                instigator_origin_id=origin_id,
                instigator_name=SENSOR,
                instigator_type=InstigatorType.SENSOR,
                status=TickStatus.STARTED,
                timestamp=time.time(),
                selector_id=selector_id,
            )
        )
        for event in result.asset_events:
            instance.report_runless_asset_event(event)
        recorded += bool(result.asset_events)
        skip = result.skip_reason.skip_message if result.skip_reason else None
        instance.update_tick(
            tick.with_status(TickStatus.SKIPPED, skip_reason=skip).with_cursor(cursor)
        )
        for days, statuses in by_status.items():
            instance.purge_ticks(
                origin_id, selector_id, before=time.time() - days * DAY_S, tick_statuses=statuses
            )
        write.append(time.perf_counter() - evaluated)
        evaluate.append(evaluated - started)
    reads: dict[str, list[float]] = {"recent_runs": [], "fail_if_stale": [], "stream_restarts": []}
    # main f7e4780 counted every run of the job (stream_restarts); issue 38 counts from the runs
    # already read (recent_restarts): no query
    count_runs = getattr(health, "stream_restarts", None)
    for _ in range(ticks):
        t0 = time.perf_counter()
        runs = health.recent_runs(instance, JOB)
        t1 = time.perf_counter()
        for r in runs:
            fail_if_stale(instance, r, time.time())
        t2 = time.perf_counter()
        if count_runs is not None:
            count_runs(instance, JOB)
        else:
            health.recent_restarts(runs, time.time())
        t3 = time.perf_counter()
        reads["recent_runs"].append(t1 - t0)
        reads["fail_if_stale"].append(t2 - t1)
        reads["stream_restarts"].append(t3 - t2)
    ms = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    return {
        "evaluate_ms": ms(evaluate),
        "evaluate_max_ms": max(evaluate) * 1000,
        "write_ms": ms(write),
        "tick_ms": ms([a + b for a, b in zip(evaluate, write, strict=True)]),
        "tick_min_ms": min(a + b for a, b in zip(evaluate, write, strict=True)) * 1000,
        "ticks_that_recorded": recorded,
        "ticks": ticks,
        **{f"{k}_ms": ms(v) for k, v in reads.items()},
    }
