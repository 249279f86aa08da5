"""The `expectations` check of a use case that declares some: its Great Expectations suite on
its whole table, on Spark, run on demand (Assets -> the use case -> Checks -> Execute)."""

import dagster as dg

from tidelake.assets.quality.expectations import validate_table
from tidelake.assets.quality.partition_checks import EXPECTATIONS, validation_verdict
from tidelake.assets.tables.keys import use_case_key
from tidelake.streaming.settings import EngineSettings
from tidelake.streaming.spark.session import host_session
from tidelake.streaming.usecase.spec import UseCaseSpec


def build_expectations_check(
    use_case: UseCaseSpec, settings: EngineSettings
) -> dg.AssetChecksDefinition | None:
    """None when the use case declares no expectations."""
    factory = use_case.expectations
    if factory is None:
        return None
    uri = settings.table_uri(use_case.table)

    @dg.asset_check(
        asset=use_case_key(use_case),
        name=EXPECTATIONS,
        description=f"{use_case.name}'s declared Great Expectations on its whole table, on Spark.",
        required_resource_keys={"spark"},
    )
    def expectations(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        with host_session(context.resources.spark) as spark:
            result = validate_table(spark, uri, list(factory()))
        return dg.AssetCheckResult(**validation_verdict(result))

    return expectations
