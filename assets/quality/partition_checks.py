"""Data-quality checks on every date partition of a flow's table, as Dagster asset checks.

- `expectations` (blocking, ERROR): the flow's Great Expectations suite on the partition.
  Blocking: in a run that also holds downstream assets of that partition, they do not run on a
  failing day; automation conditions can gate on it with all_deps_blocking_checks_passed().
- `volume_vs_trailing_7_days` (WARN): rows of the day against the median of the 7 days before.
- `quarantine_share` (WARN): share of the day's records that went to quarantine.
- freshness: a FreshnessPolicy on the table asset (tables/asset_specs.py's daily_freshness):
  yesterday's partition must be materialized within FRESHNESS_MARGIN of its closing.

The first three run by themselves when a partition of the last 7 days is materialized (the
supervisor closing the day, or a backfill), and on demand for any partition or range. Counts
come from the Delta log's statistics; only the expectations read data, on the run's Spark.
"""

import statistics
from collections.abc import Callable, Iterator
from datetime import date, timedelta
from typing import Any

import dagster as dg

from tidelake.assets.quality.expectations import Validation, validate_partition
from tidelake.assets.tables.automation import check_on_new_partitions
from tidelake.assets.tables.keys import daily_partitions, table_key
from tidelake.streaming.delta.progress import table_progress
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.spark.session import host_session

EXPECTATIONS = "expectations"
VOLUME = "volume_vs_trailing_7_days"
QUARANTINE_SHARE = "quarantine_share"


Verdict = tuple[bool, str, dict[str, Any]]
"""(passed, what was found, metadata) of one check on one date."""
DayVerdict = Callable[[dg.AssetCheckExecutionContext, str], Verdict]


def build_quality_checks(flow: FlowSpec, settings: EngineSettings) -> list[Any]:
    key = table_key(flow)
    partitions = daily_partitions(flow, settings)
    uri = settings.table_uri(flow.table)
    quarantine_uri = settings.table_uri(flow.quarantine_table)

    def expectations_verdict(context: dg.AssetCheckExecutionContext, day: str) -> Verdict:
        with host_session(context.resources.spark) as spark:
            result = validate_partition(spark, uri, flow, day)
        return result.success, validation_summary(result), validation_metadata(result)

    def volume_verdict_of(context: dg.AssetCheckExecutionContext, day: str) -> Verdict:
        return volume_verdict(flow, _rows_by_date(uri, flow), day)

    def quarantine_verdict(context: dg.AssetCheckExecutionContext, day: str) -> Verdict:
        good = _rows_by_date(uri, flow).get(day, 0)
        bad = _rows_by_date(quarantine_uri, flow).get(day, 0)
        share = bad / (good + bad) if good + bad else 0.0
        return (
            share <= flow.max_quarantine_share,
            f"{bad} of {good + bad} records quarantined ({share:.2%})",
            {"quarantined": bad, "accepted": good, "share": round(share, 6)},
        )

    checks = [
        (
            EXPECTATIONS,
            expectations_verdict,
            True,
            "The flow's Great Expectations suite on the day, on Spark: columns, types, formats, "
            "enums, ranges, event time inside the day, unique keys.",
            {"spark"},
        ),
        (
            VOLUME,
            volume_verdict_of,
            False,
            f"Rows of the day at least {1 - flow.volume_tolerance:.0%} of the median of the 7 "
            "days before.",
            set(),
        ),
        (
            QUARANTINE_SHARE,
            quarantine_verdict,
            False,
            f"At most {flow.max_quarantine_share:.1%} of the day's records quarantined.",
            set(),
        ),
    ]
    return [
        _partition_check(key, partitions, name, verdict, blocking, description, resources)
        for name, verdict, blocking, description, resources in checks
    ]


def _partition_check(
    asset: dg.AssetKey,
    partitions: dg.PartitionsDefinition,
    name: str,
    verdict: DayVerdict,
    blocking: bool,
    description: str,
    resources: set[str],
) -> dg.AssetChecksDefinition:
    """A per-date check that runs by itself on new dates (check_on_new_partitions) and on
    demand."""
    check = dg.AssetCheckKey(asset, name)

    # a per-partition check yields its results; dagster's hint expects one AssetCheckResult
    @dg.asset_check(  # type: ignore[arg-type]
        asset=asset,
        name=name,
        partitions_def=partitions,
        blocking=blocking,
        automation_condition=check_on_new_partitions(),
        description=description,
        required_resource_keys=resources,
    )
    def partition_check(context: dg.AssetCheckExecutionContext) -> Iterator[Any]:
        yield from _evaluate(context, check, verdict, blocking)

    return partition_check


def _evaluate(
    context: dg.AssetCheckExecutionContext,
    check: dg.AssetCheckKey,
    verdict: DayVerdict,
    blocking: bool,
) -> Iterator[Any]:
    """One result per date: a single-date run gets an AssetCheckResult; a range run (a
    single-run backfill) an evaluation per date, because Dagster records an AssetCheckResult of
    a range without its partition. A failed blocking date fails the step either way; blocking
    checks fail as ERROR, the others as WARN."""
    severity = dg.AssetCheckSeverity.ERROR if blocking else dg.AssetCheckSeverity.WARN
    op_context = context.op_execution_context
    if not op_context.has_partition_key_range:
        passed, text, metadata = verdict(context, context.partition_key)
        yield dg.AssetCheckResult(
            passed=passed, severity=severity, description=text, metadata=metadata
        )
        return
    for day in op_context.partition_keys:
        passed, text, metadata = verdict(context, day)
        yield dg.AssetCheckEvaluation(
            asset_key=check.asset_key,
            check_name=check.name,
            passed=passed,
            partition=day,
            severity=severity,
            description=text,
            metadata=metadata,
            blocking=blocking,
        )
    yield dg.Output(None)


def volume_verdict(
    flow: FlowSpec, rows_by_date: dict[str, int], day: str
) -> tuple[bool, str, dict[str, Any]]:
    """Pass unless the day has fewer than (1 - tolerance) x the trailing 7-day median."""
    first = date.fromisoformat(day)
    before = [rows_by_date.get((first - timedelta(days=n)).isoformat(), 0) for n in range(1, 8)]
    history = [n for n in before if n]
    rows = rows_by_date.get(day, 0)
    if not history:
        return True, f"{rows} rows; no earlier days to compare with", {"rows": rows}
    median = statistics.median(history)
    floor = (1 - flow.volume_tolerance) * median
    passed = rows >= floor
    text = f"{rows} rows against a median of {median:.0f} over {len(history)} earlier days " + (
        "(within tolerance)" if passed else f"(below {floor:.0f})"
    )
    return passed, text, {"rows": rows, "trailing_median": float(median), "minimum": floor}


def _rows_by_date(uri: str, flow: FlowSpec) -> dict[str, int]:
    progress = table_progress(uri, flow)
    return progress.rows_by_date if progress is not None else {}


def validation_summary(result: Validation) -> str:
    if result.success:
        return f"{len(result.outcomes)} expectations met by {result.rows} rows"
    failed = ", ".join(o.name for o in result.failures)
    return f"{len(result.failures)} of {len(result.outcomes)} expectations failed: {failed}"


def validation_verdict(result: Validation) -> dict[str, Any]:
    """A validation as an asset check's result or evaluation records it: passed, description,
    metadata."""
    return {
        "passed": result.success,
        "description": validation_summary(result),
        "metadata": validation_metadata(result),
    }


def validation_metadata(result: Validation) -> dict[str, Any]:
    lines = ["| expectation | unexpected | % | sample |", "| --- | --- | --- | --- |"]
    for o in result.failures:
        percent = "" if o.unexpected_percent is None else f"{o.unexpected_percent:.3f}"
        detail = o.error or ", ".join(repr(v) for v in o.sample)
        lines.append(f"| {o.name} | {o.unexpected_count or ''} | {percent} | {detail} |")
    return {
        "rows": result.rows,
        "expectations": len(result.outcomes),
        "failed": len(result.failures),
        "seconds": round(result.seconds, 2),
        "failures": dg.MetadataValue.md("\n".join(lines)),
        "results": dg.MetadataValue.json([o.__dict__ for o in result.outcomes]),
    }
