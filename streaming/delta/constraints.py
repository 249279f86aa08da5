"""A Delta table's CHECK constraints, enforced on what tidelake writes to it.

delta-spark's `ALTER TABLE ... ADD CONSTRAINT name CHECK (expr)` stores the constraint in the
table's configuration as `delta.constraints.<name>` (the name lower-cased) with the expression's
SQL text, and PROTOCOL.md asks every writer to write only rows for which each expression is true:
a row for which it is false or null fails (delta-spark's CheckDeltaInvariant). tidelake's writers
do not fail the batch: a violating row is quarantined with the constraint's name as its reason
(`violated_constraint`, evaluated in the decode, records/decode.py), so the rows that pass still
land exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column
from pyspark.sql import functions as F

from tidelake.streaming.flow.contract import reason_column

CONSTRAINT_PREFIX = "delta.constraints."


def check_constraints(configuration: Mapping[str, str]) -> dict[str, str]:
    """The CHECK constraints in a table's configuration (its metaData's), name -> SQL text, in
    name order. The prefix is matched case-insensitively, as delta-spark reads it."""
    found = {
        key[len(CONSTRAINT_PREFIX) :]: expression
        for key, expression in configuration.items()
        if key.lower().startswith(CONSTRAINT_PREFIX)
    }
    return dict(sorted(found.items()))


def violated_constraint(constraints: Mapping[str, str]) -> Column | None:
    """A column naming the first constraint a row violates (false or null, as Delta judges),
    null where it satisfies them all; None without constraints."""
    if not constraints:
        return None
    return F.coalesce(
        *[
            F.when(
                ~F.coalesce(F.expr(expression), F.lit(False)),
                reason_column("check_constraint", name=name, expression=expression),
            )
            for name, expression in constraints.items()
        ]
    )
