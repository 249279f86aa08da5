"""A flow's table follows its message: new fields become columns, breaking changes are refused.

Every column made from a message field carries that field's protobuf number, type and role
(key, event time, required) in its Delta column metadata (`tidelake.protobuf`). The table thus
records the contract its rows were written under, whoever writes next, and `evolve_table`
compares it with the flow's current message before a stream or a backfill reads a record.
Every column also carries its doc (`comment`: the .proto's comments on its field, or an engine
column's description; table_schema), kept up to date the same way as the contract.

- a new field (a number the table never had) becomes a nullable column, in one commit; rows
  written before read as null;
- widening a 32-bit integer to 64 bits (int32 -> int64, sint32 -> sint64, uint32 -> uint64 or
  int64: the same varint on the wire) rewrites the table once with the wider column;
- a field removed from the message keeps its column (null from then on) and its number;
- anything else that would mangle data is refused, naming the field and the way forward: a
  changed field type, a field number that moved or now belongs to another field, a removed
  required field, a renamed key or event-time field.

Nested messages are compared as whole column types: a change inside one is refused.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.dataset as pads
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import TableNotFoundError
from deltalake.schema import Field as DeltaField

from tidelake.streaming.delta.commit import create_table, same_column_type
from tidelake.streaming.delta.tables import open_table, write_table
from tidelake.streaming.errors import SetupError
from tidelake.streaming.flow.field_types import reads_as, type_name
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.flow.table_schema import COMMENT_KEY, column_doc, table_schema

log = logging.getLogger(__name__)

FIELD_METADATA_KEY = "tidelake.protobuf"
Role = Literal["key", "event_time", "required"]


class SchemaChangeError(SetupError, RuntimeError):
    """The flow's message changed in a way its table cannot follow; nothing was changed."""


@dataclass(frozen=True)
class FieldContract:
    """What the table remembers of the message field behind a column."""

    number: int
    type: str
    """The protobuf type ("int32", "string", "enum", "message"), "repeated " first if so."""
    role: Role | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> FieldContract:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class TableEvolution:
    """What evolve_table did to the table."""

    created: bool = False
    added: tuple[str, ...] = ()
    widened: tuple[str, ...] = ()
    restamped: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.created or bool(self.added or self.widened or self.restamped)


def field_contracts(flow: FlowSpec) -> dict[str, FieldContract]:
    """The flow's message fields as the table records them, by column name."""
    roles: dict[str, Role] = {name: "required" for name in flow.required_fields}
    roles[flow.event_time_field] = "event_time"
    roles[flow.key_field] = "key"
    return {
        f.name: FieldContract(f.number, type_name(f), roles.get(f.name))
        for f in flow.message.DESCRIPTOR.fields
    }


def contract_schema(flow: FlowSpec) -> pa.Schema:
    """table_schema(flow) (each column with its doc) with each message column's FieldContract
    in its metadata."""
    contracts = field_contracts(flow)
    return pa.schema(
        [
            f.with_metadata(
                {**(f.metadata or {}), FIELD_METADATA_KEY.encode(): contracts[f.name].to_json()}
            )
            if f.name in contracts
            else f
            for f in table_schema(flow)
        ]
    )


def evolve_table(flow: FlowSpec, table_uri: str) -> TableEvolution:
    """Create the flow's table, or bring it to the flow's message (see the module docstring);
    raises SchemaChangeError, before changing anything, for a change it cannot follow."""
    want = contract_schema(flow)
    try:
        table = open_table(table_uri)
    except TableNotFoundError:
        create_table(table_uri, want, [flow.partition_column])
        return TableEvolution(created=True)
    have = {f.name: f for f in pa.schema(table.schema().to_arrow())}
    stored = {
        f.name: FieldContract.from_json(f.metadata[FIELD_METADATA_KEY])
        for f in table.schema().fields
        if FIELD_METADATA_KEY in f.metadata
    }
    contracts = field_contracts(flow)
    problems = _breaking_changes(flow, want, have, stored, contracts)
    if problems:
        raise SchemaChangeError(
            f"flow {flow.name}: {flow.message.DESCRIPTOR.full_name} cannot be written to "
            f"{table_uri} (nothing was changed): " + " ".join(problems)
        )
    added = [f for f in want if f.name not in have]
    widened = [
        f for f in want if f.name in have and not same_column_type(have[f.name].type, f.type)
    ]
    restamped = {
        f.name: _restamp(have[f.name], f, contracts.get(f.name), stored.get(f.name))
        for f in want
        if f.name in have
    }
    if widened:
        _rewrite_wider(table, flow, want, [f.name for f in widened])
        table = open_table(table_uri)
        for f in widened:  # the rewrite wrote their contracts and docs
            restamped.pop(f.name, None)
    restamped = {name: metadata for name, metadata in restamped.items() if metadata}
    if added:
        table.alter.add_columns(
            [DeltaField.from_arrow(f) for f in added],
            commit_properties=CommitProperties(
                custom_metadata={"tidelake.added_columns": ",".join(f.name for f in added)}
            ),
        )
    for name, metadata in restamped.items():
        table.alter.set_column_metadata(name, metadata)
    evolution = TableEvolution(
        added=tuple(f.name for f in added),
        widened=tuple(f.name for f in widened),
        restamped=tuple(restamped),
    )
    if evolution.changed:
        log.info("%s follows %s: %s", table_uri, flow.message.DESCRIPTOR.full_name, evolution)
    return evolution


def _restamp(
    have: pa.Field, want: pa.Field, contract: FieldContract | None, stored: FieldContract | None
) -> dict[str, str]:
    """The column metadata that brings the table's column `have` to the flow's `want`: its
    contract and its doc (the doc set to "" when the field lost its comments); {} if none."""
    metadata: dict[str, str] = {}
    if contract is not None and contract != stored:
        metadata[FIELD_METADATA_KEY] = contract.to_json()
    if column_doc(want) != column_doc(have):
        metadata[COMMENT_KEY] = column_doc(want)
    return metadata


def _breaking_changes(
    flow: FlowSpec,
    want: pa.Schema,
    have: dict[str, pa.Field],
    stored: dict[str, FieldContract],
    contracts: dict[str, FieldContract],
) -> list[str]:
    """One sentence per change the table cannot follow, each with the way forward."""
    problems = []
    for role, now_name, what, defines in (
        ("key", flow.key_field, "key field", "its rows' identity and deduplication"),
        ("event_time", flow.event_time_field, "event-time field", "its dates and backfills"),
    ):
        before_name = next((name for name, c in stored.items() if c.role == role), now_name)
        if before_name != now_name:
            problems.append(
                f"The {what} was {before_name!r} and is now {now_name!r}: the table's "
                f"{defines} are defined by {before_name!r}. Keep the field's name "
                f"{before_name!r}, or declare a new flow (its own name and table) for the new "
                "contract."
            )
    owners = {c.number: name for name, c in stored.items()}
    free = max([*owners, *(c.number for c in contracts.values())], default=0) + 1
    for name, now in contracts.items():
        before = stored.get(name)
        owner = owners.get(now.number, name)
        if before is not None and before.number != now.number:
            problems.append(
                f"Field {name!r} moved from number {before.number} to {now.number}: producers "
                f"still send it as {before.number}. Keep {name} = {before.number}."
            )
        elif owner != name and stored[owner].role not in ("key", "event_time"):
            problems.append(
                f"Field number {now.number} belonged to {owner!r} and now to {name!r}: records "
                f"from producers still sending {owner!r} would fill {name!r}. Give {name!r} an "
                f"unused number such as {free} and mark {now.number} as `reserved {now.number};`."
            )
        elif name in have and not _follows(have[name].type, want.field(name).type, before, now):
            if before is not None and before.type != now.type:
                was, becomes = before.type, now.type
            else:
                was, becomes = str(have[name].type), str(want.field(name).type)
            problems.append(
                f"Field {name!r} changed type from {was} to {becomes}: the rows already "
                f"written cannot be read as {becomes}. Keep {name!r} as {was} and add the "
                f"new values as a new field, under an unused number such as {free}."
            )
    for name, before in stored.items():
        if name not in contracts and before.role == "required":
            problems.append(
                f"Required field {name!r} was removed from the message: every record would be "
                f"refused as missing it. Keep {name!r} in the .proto, or first stop requiring "
                f"it (drop it from the flow's required_fields and restart), then remove it."
            )
    return problems


def _follows(
    column: pa.DataType, want: pa.DataType, before: FieldContract | None, now: FieldContract
) -> bool:
    """Whether a column of type `column`, made from field `before`, can hold field `now`
    (whose column type is `want`)."""
    if before is not None and before.type != now.type:
        return reads_as(before.type, now.type)
    return same_column_type(column, want) or (column, want) == (pa.int32(), pa.int64())


def _rewrite_wider(table: DeltaTable, flow: FlowSpec, want: pa.Schema, columns: list[str]) -> None:
    """Rewrite every file with the wider columns, as one overwrite commit; the table keeps its
    application transactions, so the stream resumes exactly where it was."""
    current = pa.schema(table.schema().to_arrow())
    target = pa.schema([want.field(f.name) if f.name in columns else f for f in current])
    dataset: pads.Dataset = table.to_pyarrow_dataset()
    log.warning("rewriting %s to widen %s", table.table_uri, columns)
    write_table(
        table.table_uri,
        pa.RecordBatchReader.from_batches(
            target,
            (
                batch.cast(target)
                for batch in dataset.to_batches(columns=current.names)
                if batch.num_rows
            ),
        ),
        mode="overwrite",
        schema_mode="overwrite",
        partition_by=[flow.partition_column],
        commit_properties=CommitProperties(
            custom_metadata={"tidelake.widened_columns": ",".join(columns)}
        ),
    )
