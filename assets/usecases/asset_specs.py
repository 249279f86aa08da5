"""A use case as the Dagster UI shows it: its table's asset, with an edge from its input,
grouped with its flow, its kind, owners, column docs and health checks."""

from __future__ import annotations

from typing import Any

import dagster as dg
import pyarrow as pa
from deltalake.exceptions import TableNotFoundError

from tidelake.assets.tables.asset_specs import column_schema
from tidelake.assets.tables.keys import table_key, use_case_key
from tidelake.streaming.delta.tables import open_table
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.usecase.spec import Upsert, UseCaseSpec
from tidelake.streaming.usecase.stream import stream_job_name

USE_CASE_RUNNING = "use_case_running"
USE_CASE_FRESH = "use_case_fresh"

_HOW = {
    "append": "Rows appended as they come, exactly once per micro-batch (Delta application "
    "transaction), partitioned by date.",
    "upsert": "The latest row per key, updated by one idempotent MERGE per micro-batch.",
    "daily": "Day D is rebuilt whole from the input's day D when that day closes or is "
    "backfilled (Dagster's automation), in one Delta commit that leaves the other days alone.",
}


def table_schema_if_exists(table_uri: str) -> pa.Schema | None:
    """The schema of the Delta table at table_uri (its column docs as comments), None before
    it exists."""
    try:
        return pa.schema(open_table(table_uri).schema().to_arrow())
    except (TableNotFoundError, OSError):
        return None


def use_case_columns(use_case: UseCaseSpec, schema: pa.Schema | None) -> dg.TableSchema:
    """The table's columns with their types and docs from `schema` (its table's, or planned
    before it exists: definitions.use_case_schemas), else the declared docs without types."""
    if schema is None:
        return dg.TableSchema(
            columns=[
                dg.TableColumn(name, "", description=doc) for name, doc in use_case.columns.items()
            ]
        )
    return column_schema(schema)


def use_case_asset_spec(
    use_case: UseCaseSpec,
    flow: FlowSpec,
    settings: EngineSettings,
    schema: pa.Schema | None = None,
) -> dg.AssetSpec:
    """A streaming use case's table: written by its always-on run outside any materialization,
    so an asset spec whose observations carry its lag."""
    attributes = use_case_attributes(use_case, flow, settings, schema=schema)
    return dg.AssetSpec(use_case_key(use_case), **attributes)


def use_case_attributes(
    use_case: UseCaseSpec,
    flow: FlowSpec,
    settings: EngineSettings,
    deps: list[dg.AssetKey] | None = None,
    schema: pa.Schema | None = None,
) -> dict[str, Any]:
    """What the UI shows of a use case's table, for its AssetSpec or its daily asset: the edges
    from its inputs (`deps`; the flow's table by default), its flow's group, kind, owners,
    columns (`schema`: its table's, or planned before it exists) and where it lives."""
    metadata: dict[str, object] = {
        "dagster/uri": settings.table_uri(use_case.table),
        "dagster/column_schema": use_case_columns(use_case, schema),
        "use_case_kind": use_case.kind,
        "function": f"{use_case.function.__module__}.{use_case.function.__qualname__}",
    }
    if use_case.streaming:
        metadata["job"] = stream_job_name(use_case)
        metadata["checkpoint"] = settings.checkpoint_uri(use_case.checkpoint_name)
    if isinstance(use_case.output, Upsert):
        metadata["key"] = ", ".join(use_case.output.key)
        metadata["sequence_by"] = use_case.output.sequence_by
    return {
        "deps": deps or [table_key(flow)],
        "description": f"{use_case.description} {_HOW[use_case.kind]}".strip(),
        "group_name": flow.name,
        "kinds": {"spark", "delta", use_case.kind},
        "owners": list(use_case.owners),
        "metadata": metadata,
    }


def use_case_check_specs(use_case: UseCaseSpec) -> list[dg.AssetCheckSpec]:
    key = use_case_key(use_case)
    return [
        dg.AssetCheckSpec(
            USE_CASE_RUNNING,
            asset=key,
            description="A run of the use case's stream is up and not crash-looping; a failed "
            "run's error otherwise.",
        ),
        dg.AssetCheckSpec(
            USE_CASE_FRESH,
            asset=key,
            description="The oldest input commit the use case has not read waits at most "
            f"{use_case.max_freshness.total_seconds():.0f} s.",
        ),
    ]
