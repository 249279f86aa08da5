"""The stream_alive and lag_below_threshold checks of each flow's table, runnable on demand.

The supervisor sensor records both every tick; executing them from the UI measures the same
things at once (no Spark, one bounded Kafka probe).
"""

import time
from collections.abc import Iterator

import dagster as dg

from tidelake.assets.resources import KafkaResource
from tidelake.assets.stream.health import measure_health, recent_restarts, recent_runs
from tidelake.assets.stream.supervisor_decision import SupervisorPolicy, decide
from tidelake.assets.tables.asset_specs import LAG_BELOW_THRESHOLD, STREAM_ALIVE
from tidelake.assets.tables.keys import table_key
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.stream.query import stream_name


def build_stream_checks(
    flow: FlowSpec, settings: EngineSettings, policy: SupervisorPolicy
) -> dg.AssetChecksDefinition:
    key = table_key(flow)
    checkpoint = settings.checkpoint_uri(flow.name)

    @dg.multi_asset_check(
        name=f"{flow.name}_stream_health",
        specs=[
            dg.AssetCheckSpec(
                STREAM_ALIVE,
                asset=key,
                description="A run of the stream is up, not crash-looping, and committing "
                "batches while records wait.",
            ),
            dg.AssetCheckSpec(
                LAG_BELOW_THRESHOLD,
                asset=key,
                description=f"Records on Kafka not yet in the table stay at most {flow.max_lag}.",
            ),
        ],
    )
    def stream_health(
        context: dg.AssetCheckExecutionContext, kafka: KafkaResource
    ) -> Iterator[dg.AssetCheckResult]:
        job = stream_name(flow)
        instance = context.instance
        now = time.time()
        runs = recent_runs(instance, job)
        decision = decide(runs, now, policy)
        restarts = recent_restarts(runs, now)
        health = measure_health(flow, checkpoint, kafka.client_config(), decision, restarts, now)
        yield from health.check_results()

    return stream_health
