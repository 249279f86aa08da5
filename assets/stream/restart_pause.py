"""A deployment-wide pause of the supervisors' restarts, kept in the Dagster instance.

A supervisor restarts a stream whose run ended CANCELED (a terminate from the UI restarts it).
When the platform itself stops (`tidelake dev` on Ctrl-C terminates the runs, then shuts Dagster
down), a sensor tick between the two would restart the streams it just stopped: a new run that
the shutdown kills, or a traceback from a launch into a code location already gone. The pause
says "do not start runs" to every supervisor until it is lifted; the one who stops the platform
sets it and the one who starts it lifts it.
"""

from __future__ import annotations

import time

import dagster as dg

_KEY = "tidelake/stream_restarts_paused"


def pause_restarts(instance: dg.DagsterInstance, why: str) -> None:
    """Until resume_restarts, no supervisor launches a run of its stream."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    instance.daemon_cursor_storage.set_cursor_values({_KEY: f"{why} (since {stamp})"})


def resume_restarts(instance: dg.DagsterInstance) -> None:
    instance.daemon_cursor_storage.set_cursor_values({_KEY: ""})


def restarts_paused(instance: dg.DagsterInstance) -> str | None:
    """Why the supervisors' restarts are paused, or None when they are not."""
    return instance.daemon_cursor_storage.get_cursor_values({_KEY}).get(_KEY) or None
