"""A use case is a declaration and one PySpark function: what it reads, how its output lands.

`UseCaseSpec` names its input (a flow's table, read as Delta's streaming source), the function
(a streaming DataFrame in, passed by the input's name; one DataFrame out) and its output kind:

- `Append`: a date-partitioned Delta table, rows as they come;
- `Upsert`: a Delta table keyed by `key`, the latest row per key by `sequence_by` (SCD type 1),
  with `sums` added up across rows, updated by one MERGE per micro-batch;
- `Daily`: a date-partitioned Delta table whose day D is the function applied to the input's
  day D, replaced whole whenever that input day is closed or rebuilt.

Append and Upsert run always on as one streaming query each (streaming/usecase/stream.py); a
Daily one runs as a Dagster asset partition per day (streaming/usecase/daily.py). Nothing in the
engine is written per use case.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from tidelake.streaming.errors import SetupError
from tidelake.streaming.flow.spec import ExpectationsFactory

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

UseCaseFunction = Callable[..., "DataFrame"]
"""(**inputs: DataFrame) -> DataFrame, each input passed by its name in UseCaseSpec.inputs."""

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

EVENT_TIMESTAMP = "event_timestamp"
"""The column the engine adds to an input read from a flow (its event time as a UTC timestamp),
on which a streaming use case's watermark is set."""


class UseCaseError(SetupError, ValueError):
    """A use case declaration that cannot work, or a use case whose output no longer fits; the
    message names the use case and the problem in one line."""


@dataclass(frozen=True)
class FlowTable:
    """A flow's landed Delta table."""

    flow: str


@dataclass(frozen=True)
class UseCaseTable:
    """Another use case's table, by day: an Append or a Daily one (a Daily use case's input;
    an Upsert table has no days)."""

    use_case: str


UseCaseInput = FlowTable | UseCaseTable
"""What a use case reads; later inputs (a topic) join this union."""


@dataclass(frozen=True)
class Append:
    """Rows appended as they come, partitioned by the UTC date of `time_column`."""

    time_column: str = EVENT_TIMESTAMP


@dataclass(frozen=True)
class Upsert:
    """The latest row per key (SCD type 1): a row replaces the stored one only when its
    `sequence_by` is newer, so an older event never overwrites a newer one; `sums` columns are
    added to the stored totals instead."""

    key: tuple[str, ...]
    sequence_by: str
    sums: tuple[str, ...] = ()


@dataclass(frozen=True)
class Daily:
    """One partition per UTC day: the function gets the input's day (a static DataFrame, read
    at one Delta version) and returns the derived day, which replaces the table's day whole."""


OutputKind = Append | Upsert | Daily


@dataclass(frozen=True)
class UseCaseSpec:
    """One use case, declared as data around its function."""

    name: str
    inputs: Mapping[str, UseCaseInput]
    """The function's keyword arguments, each an input."""
    function: UseCaseFunction = field(compare=False, repr=False)
    output: OutputKind
    description: str = ""
    owners: tuple[str, ...] = ()
    columns: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    """Column docs of the output, by column name (shown in the UI, stored as Delta comments)."""
    expectations: ExpectationsFactory | None = field(default=None, compare=False, repr=False)
    """Great Expectations its table must meet (its `expectations` check)."""
    watermark: timedelta = timedelta(seconds=10)
    """How late an input's event may arrive for stateful operations in the function
    (deduplication within the watermark), on the input's event_timestamp."""
    trigger_interval: str = "1 second"
    """The processing-time trigger of the use case's query."""
    max_freshness: timedelta = timedelta(seconds=30)
    """The use case is fresh while the p99 of the time from its input's commit to its
    own commit of the same rows stays at most this (its `use_case_fresh` check)."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise UseCaseError(f"use case name {self.name!r} must match {_NAME.pattern}")
        if not self.inputs:
            raise UseCaseError(f"use case {self.name}: it declares no inputs")
        for argument in self.inputs:
            if not argument.isidentifier():
                raise UseCaseError(
                    f"use case {self.name}: input name {argument!r} is not a Python identifier"
                )
        if not callable(self.function):
            raise UseCaseError(f"use case {self.name}: function is not callable")
        if len(self.inputs) != 1:
            raise UseCaseError(
                f"use case {self.name}: it reads exactly one input, not {len(self.inputs)}"
            )
        for argument, source in self.inputs.items():
            if not isinstance(source, FlowTable | UseCaseTable):
                raise UseCaseError(
                    f"use case {self.name}: input {argument!r} is {source!r}, not a FlowTable "
                    "or UseCaseTable"
                )
            if isinstance(source, UseCaseTable) and not isinstance(self.output, Daily):
                raise UseCaseError(
                    f"use case {self.name}: input {argument!r} is use case "
                    f"{source.use_case!r}'s table, which only a Daily use case reads; a "
                    "streaming one reads a flow's table"
                )
        if not isinstance(self.output, Append | Upsert | Daily):
            raise UseCaseError(
                f"use case {self.name}: output is {self.output!r}, not Append(...), Upsert(...) "
                "or Daily()"
            )
        if isinstance(self.output, Upsert):
            if not self.output.key:
                raise UseCaseError(f"use case {self.name}: Upsert needs a key")
            clash = set(self.output.key) & ({self.output.sequence_by} | set(self.output.sums))
            if clash:
                raise UseCaseError(
                    f"use case {self.name}: key column(s) {sorted(clash)} cannot also be "
                    "sequence_by or sums"
                )
        if self.watermark < timedelta(0):
            raise UseCaseError(f"use case {self.name}: watermark must be >= 0")

    @property
    def table(self) -> str:
        """The output's Delta table (a folder under the lake root)."""
        return self.name

    @property
    def kind(self) -> str:
        """The output kind's name, as the UI shows it."""
        return _KIND_NAMES[type(self.output)]

    @property
    def partition_column(self) -> str | None:
        """The output's partition column: `date`, but none for Upsert (keyed, unpartitioned)."""
        return None if isinstance(self.output, Upsert) else "date"

    @property
    def streaming(self) -> bool:
        """Runs always on as a streaming query (Append, Upsert), not by day (Daily)."""
        return not isinstance(self.output, Daily)

    @property
    def checkpoint_name(self) -> str:
        """Its query's checkpoint folder under the checkpoint root."""
        return f"use_case-{self.name}"

    def call(self, inputs: Mapping[str, Any]) -> Any:
        """The function applied to `inputs` (DataFrames by input name); an exception it raises
        becomes a UseCaseError naming the use case."""
        try:
            return self.function(**inputs)
        except Exception as exc:  # the data scientist's code: any exception is theirs
            raise UseCaseError(
                f"use case {self.name}: its function raised {type(exc).__name__}: "
                f"{_first_line(str(exc))}"
            ) from exc


_KIND_NAMES: dict[type, str] = {
    Append: "append",
    Upsert: "upsert",
    Daily: "daily",
}


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "(no message)"


_PYTHON_ERROR = re.compile(r"^\s*(\w+(?:Error|Exception)): (.+)$", re.MULTILINE)


def failure_line(use_case: UseCaseSpec, failure: BaseException | str) -> str:
    """A failed query's error in one line naming the use case: the innermost Python exception
    Spark's wrapping holds (the function's own), else its first line."""
    text = str(failure)
    found = _PYTHON_ERROR.findall(text)
    if found:
        kind, message = found[-1]
        return f"use case {use_case.name}: {kind}: {message.strip()[:500]}"
    first = text.strip().splitlines()[0] if text.strip() else "the query failed"
    return f"use case {use_case.name}: {first[:500]}"
