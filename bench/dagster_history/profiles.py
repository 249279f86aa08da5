"""What a design leaves in Dagster's storage over time: the stream's cadences and two profiles."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import yaml
from dagster._core.scheduler.instigation import InstigatorType  # no public tick API

from tidelake.assets.stream.supervisor_sensor import supervisor_sensor_name
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.stream.query import stream_name

REPO = Path(__file__).resolve().parents[2]
DAY_S = 86_400.0
TICK_S = 20.0
PROGRESS_S = 30.0
JOB = stream_name(CALL_EVENTS)
SENSOR = supervisor_sensor_name(CALL_EVENTS)
TABLE = ["lake", "call_events"]
STREAM_TAG = "tidelake/stream"


@dataclass(frozen=True)
class Profile:
    """What a design leaves in Dagster's storage over time."""

    name: str
    health_every_s: float
    """How often the supervisor records its observation and two check evaluations when nothing
    changes (every tick: TICK_S)."""
    records_per_restart: int
    """Extra health records a restart causes (the verdicts change)."""
    run_observation_every_s: float
    tick_retention: dict[str, int]
    """Days each tick status is kept (-1: forever), as the sensor daemon purges them."""
    instance_settings: dict[str, Any] = field(default_factory=dict)


def before_profile() -> Profile:
    default = {"skipped": 7, "success": -1, "failure": -1}  # Dagster 1.13's defaults
    return Profile("before", TICK_S, 0, PROGRESS_S, default)


def after_profile() -> Profile:
    from tidelake.assets.stream.health import HEALTH_HEARTBEAT_S

    settings = yaml.safe_load((REPO / "platform/dev/dagster.yaml").read_text())
    with dg.instance_for_test(overrides={"retention": settings["retention"]}) as instance:
        kept = instance.get_tick_retention_settings(InstigatorType.SENSOR)
    retention = {status.value.lower(): days for status, days in kept.items()}
    return Profile(
        "after",
        HEALTH_HEARTBEAT_S,
        3,
        HEALTH_HEARTBEAT_S,
        retention,
        {"retention": settings["retention"]},
    )
