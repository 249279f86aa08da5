"""A use case's supervisor, evaluated with Dagster's helpers against a real instance: it waits
for the input table, starts the use case's job, and after a real run of the job failed (the
function raises) shows that run's one line in its reason and in `use_case_running`."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tidelake.assets.definitions import build_definitions
from tidelake.assets.resources import KafkaResource
from tidelake.assets.stream.always_on import STREAM_TAG
from tidelake.assets.stream.supervisor_decision import SupervisorPolicy
from tidelake.assets.usecases.asset_specs import USE_CASE_FRESH, USE_CASE_RUNNING
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.flow.table_schema import table_schema

POLICY = SupervisorPolicy(backoff_base_s=30, backoff_cap_s=600, healthy_after_s=300)


def some_calls(count: int) -> pa.Table:
    rng = random.Random(count)
    when = datetime(2026, 12, 1, 12, tzinfo=UTC)
    rows = [
        {
            "call_sid": f"CA{rng.getrandbits(128):032x}",
            "account_sid": "AC" + "0" * 32,
            "duration": 10,
            "call_state": "completed",
            "region": "us1",
            "event_time": when,
            "date": when.date(),
        }
        for _ in range(count)
    ]
    return pa.Table.from_pylist(rows, schema=table_schema(CALL_EVENTS))


def evaluate(
    defs: dg.Definitions, name: str, instance: dg.DagsterInstance, kafka_conf: dict[str, Any]
) -> dg.SensorResult:
    context = dg.build_sensor_context(
        instance=instance,
        definitions=defs,
        resources={"kafka": KafkaResource(bootstrap_servers=kafka_conf["bootstrap.servers"])},
    )
    return defs.resolve_sensor_def(f"use_case_{name}_supervisor")(context)


def checks(result: dg.SensorResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation)}


@pytest.mark.parametrize("make_instance", ["sqlite"], indirect=True)
def test_the_supervisor_waits_for_the_input_starts_the_use_case_and_names_its_failure(
    spark: Any, make_instance: Any, engine_settings: Any, kafka_conf: Any
) -> None:
    settings = engine_settings.model_copy(update={"use_case_modules": ["raising_use_case"]})
    defs = build_definitions({CALL_EVENTS.name: CALL_EVENTS}, settings, POLICY)
    key = dg.AssetKey(["lake", "account_activity"])
    graph = defs.resolve_asset_graph()
    assert graph.get(key).parent_keys == {dg.AssetKey(["lake", "call_events"])}
    assert graph.get(key).group_name == "call_events"
    with make_instance() as instance:
        waiting = evaluate(defs, "account_activity", instance, kafka_conf)
        assert not waiting.run_requests
        assert "does not exist yet" in waiting.skip_reason.skip_message
        assert not checks(waiting)[USE_CASE_RUNNING].passed

        write_deltalake(settings.table_uri(CALL_EVENTS.table), some_calls(5), partition_by=["date"])
        (request,) = evaluate(defs, "account_activity", instance, kafka_conf).run_requests
        assert request.tags[STREAM_TAG] == "use_case_account_activity"

        job = defs.resolve_job_def("use_case_raising")
        run = job.execute_in_process(instance=instance, raise_on_error=False)
        assert not run.success
        result = evaluate(defs, "raising", instance, kafka_conf)
    (restart,) = result.run_requests
    reason = restart.tags["tidelake/supervisor_reason"]
    assert "use case raising: its function raised" in reason, reason
    running = checks(result)[USE_CASE_RUNNING]
    assert not running.passed and "use case raising: its function raised" in (
        running.description or ""
    )
    fresh = checks(result)[USE_CASE_FRESH]
    assert "1 input versions behind" in (fresh.description or ""), fresh.description
