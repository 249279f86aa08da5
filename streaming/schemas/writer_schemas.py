"""Which framed records a flow can read, decided once per writer schema on the driver.

A framed record names its writer's schema by registry id and the message in it by index path
(schemas/framing.py). For every schema id the driver works out a verdict, one entry per path:
decode it as the flow's message, or refuse it with a reason. The JVM decoder applies the
verdicts per record (dev.tidelake.spark.ProtobufDecoder); every word of every reason comes from
here and from flow/contract.py's WORDING.

- Without a registry the writer's schema is taken to be the flow's own .proto: the path of the
  flow's message decodes, another message of that file is refused naming it.
- With one, the driver reads each id once (prefetching the versions of the topic's value
  subject at start) and compares the writer's message with the flow's by the rules a changed
  .proto follows (flow/field_types.py): a field the flow lacks is skipped, a field both have
  must keep its number, name and a type that reads as the flow's; a message of another name is
  refused. A record whose id the plan did not know yet is refused as pending: the stream's
  writer never commits a batch that holds one (it learns the id and restarts the query), so a
  registry that cannot answer stops the stream with one line naming it and the id.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from tidelake.streaming.flow.contract import WORDING
from tidelake.streaming.flow.field_types import reads_as, type_name
from tidelake.streaming.flow.spec import FlowSpec
from tidelake.streaming.schemas.framing import message_paths
from tidelake.streaming.schemas.registry_client import (
    SchemaRegistry,
    SchemaRegistryUnavailableError,
    WriterSchema,
    value_subject,
)

log = logging.getLogger(__name__)

ANY_SCHEMA = "schema id {id}"
"""How a reason names a schema the driver has not read (the decoder fills {id})."""


@dataclass(frozen=True)
class Verdict:
    """What to do with the records of one writer schema, by message index path."""

    paths: dict[str, str | None]
    """Path ("0", "1.0") -> None to decode as the flow's message, else the refusal."""
    other: str
    """The refusal for a path the schema does not have ({path} filled by the decoder)."""
    flow_path: str | None = None
    """The path of the flow's message in the schema, None if the schema does not have it."""
    label: str = ""
    """How the schema is shown: its id and the subject versions it is registered under."""
    registered_as: str = ""
    """The subject versions alone ("call_events-value v2"), "" when not known."""

    @property
    def refusal(self) -> str | None:
        """Why records of the schema are quarantined when they name the flow's message (or,
        for a schema without it, the first message); None when they land."""
        if self.flow_path is not None:
            return self.paths[self.flow_path]
        return self.paths.get("0") or self.other

    def as_data(self) -> dict[str, object]:
        return {"paths": self.paths, "other": self.other}


def own_verdict(flow: FlowSpec) -> Verdict:
    """Framed records without a registry: the writer's schema is the flow's .proto."""
    return _verdict(flow, message_paths(flow.message.DESCRIPTOR.file), ANY_SCHEMA)


def writer_verdict(flow: FlowSpec, writer: WriterSchema) -> Verdict:
    """The verdict on a schema read from the registry."""
    verdict = _verdict(flow, message_paths(writer.file), writer.label)
    return replace(verdict, label=writer.label, registered_as=writer.registered_as)


def refused_verdict(reason: str, label: str) -> Verdict:
    """Every record of the schema refused with reason."""
    return Verdict({}, reason, label=label)


def contract_breaks(written: Descriptor, read: Descriptor, prefix: str = "") -> list[str]:
    """Why records of message `written` cannot be read as `read`, one phrase per field."""
    by_number = {f.number: f for f in read.fields}
    by_name = {f.name: f for f in read.fields}
    problems = []
    for w in written.fields:
        r = by_number.get(w.number)
        if r is None:
            moved = by_name.get(w.name)
            if moved is not None:
                problems.append(
                    f"field {prefix}{w.name} is number {w.number} there and {moved.number} in "
                    "the flow"
                )
            continue  # a field the flow does not have: skipped when read
        if r.name != w.name:
            problems.append(
                f"field number {w.number} is {prefix}{w.name} there and {prefix}{r.name} in the "
                "flow (a reused field number)"
            )
        elif not reads_as(type_name(w), type_name(r)):
            problems.append(
                f"field {prefix}{w.name} is {type_name(w)} there and {type_name(r)} in the flow"
            )
        elif w.type == FieldDescriptor.TYPE_MESSAGE:
            problems.extend(contract_breaks(w.message_type, r.message_type, f"{prefix}{w.name}."))
    return problems


@dataclass
class WriterSchemas:
    """The driver's verdicts on the schema ids a flow's records name, and the ids seen."""

    flow: FlowSpec
    registry: SchemaRegistry | None
    verdicts: dict[int, Verdict] = field(default_factory=dict)
    seen: dict[int, str] = field(default_factory=dict)
    """Schema ids in records the flow has read, with their labels."""

    @classmethod
    def from_env(cls, flow: FlowSpec) -> WriterSchemas:
        """The flow's verdicts with the registry the environment names, if any."""
        return cls(flow, SchemaRegistry.from_env())

    def framing(self) -> str:
        """The decoder's `framing` argument: every verdict and reason, as JSON."""
        return json.dumps(
            {
                "registry": self.registry is not None,
                "own": own_verdict(self.flow).as_data(),
                "schemas": {str(i): v.as_data() for i, v in self.verdicts.items()},
                "unknown": WORDING["schema_pending"],
                "truncated": WORDING["frame_truncated"],
            }
        )

    def prefetch(self) -> None:
        """Read the versions of the topic's value subject, so that the first batches do not
        meet them as unknown; a registry that does not answer is only logged here."""
        if self.registry is None:
            return
        subject = value_subject(self.flow)
        try:
            self.learn(self.registry.subject_schema_ids(subject))
        except SchemaRegistryUnavailableError as exc:
            log.warning("%s; schema ids are read when records name them", exc)

    def learn(self, schema_ids: Iterable[int]) -> list[int]:
        """Note the ids as seen and read those without a verdict; returns the ids learned (a
        running plan does not know them: restart its query). Raises
        SchemaRegistryUnavailableError, naming the registry and the id, when it cannot."""
        learned = []
        for schema_id in sorted(set(schema_ids)):
            if schema_id not in self.verdicts and self.registry is not None:
                self.verdicts[schema_id] = self._read(self.registry, schema_id)
                learned.append(schema_id)
            verdict = self.verdicts.get(schema_id)
            self.seen[schema_id] = verdict.label if verdict else f"schema id {schema_id}"
        return learned

    def _read(self, registry: SchemaRegistry, schema_id: int) -> Verdict:
        label = f"schema id {schema_id}"
        try:
            writer = registry.writer_schema(schema_id)
        except ValueError as exc:
            reason = _fill("schema_unreadable", schema=label, problem=str(exc))
            return refused_verdict(reason, label)
        if writer is None:
            reason = _fill("schema_not_registered", registry=registry.url)
            return refused_verdict(reason.replace("{id}", str(schema_id)), label)
        verdict = writer_verdict(self.flow, writer)
        refused = sorted({r for r in verdict.paths.values() if r})
        log.info(
            "%s: %s",
            writer.label,
            "; ".join(refused) if refused and None not in verdict.paths.values() else "readable",
        )
        return verdict


def _verdict(flow: FlowSpec, messages: Iterable[tuple[str, Descriptor]], schema: str) -> Verdict:
    want = flow.message.DESCRIPTOR
    paths: dict[str, str | None] = {}
    flow_path = None
    for path, message in messages:
        if message.full_name != want.full_name:
            paths[path] = _fill(
                "frame_other_message",
                schema=schema,
                message=message.full_name,
                flow_message=want.full_name,
            )
            continue
        flow_path = path
        problems = contract_breaks(message, want)
        paths[path] = (
            _fill("schema_breaks_contract", schema=schema, problems="; ".join(problems))
            if problems
            else None
        )
    return Verdict(paths, _fill("frame_no_message", schema=schema), flow_path)


def _fill(key: str, **values: str) -> str:
    """WORDING[key] with the named placeholders filled; the decoder's ({id}, {path}) stay."""
    text = WORDING[key]
    for name, value in values.items():
        text = text.replace(f"{{{name}}}", value)
    return text
