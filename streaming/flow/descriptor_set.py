"""The descriptor sets `make protos` writes next to a flow's generated code (no Spark needed).

`<name>.binpb`, a FileDescriptorSet of `<name>.proto` and its imports, is what the JVM decoder
reads (records/decode.py); a flow without one gets a set made from its generated code. The file
also keeps the .proto's comments (source_code_info), which the generated `<name>_pb2.py` leaves
out: they are the contract's own words for each field, and document the flow's table columns
(table_schema).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, FileDescriptor
from google.protobuf.message import Message

from tidelake.streaming.errors import SetupError
from tidelake.streaming.flow.spec import FlowSpec

_MESSAGE_TYPE = descriptor_pb2.FileDescriptorProto.MESSAGE_TYPE_FIELD_NUMBER
_NESTED_TYPE = descriptor_pb2.DescriptorProto.NESTED_TYPE_FIELD_NUMBER
_FIELD = descriptor_pb2.DescriptorProto.FIELD_FIELD_NUMBER

log = logging.getLogger(__name__)


class DescriptorSetError(SetupError, RuntimeError):
    """A flow's descriptor set is missing or disagrees with its generated code."""


def descriptor_set(flow: FlowSpec) -> bytes:
    """The FileDescriptorSet the JVM decoder reads for the flow's message.

    `<name>.binpb` next to the generated module when there is one (`make protos` writes it, with
    the .proto's comments); it must describe the same fields as the generated code, so a stale
    file is refused here, not as a Spark schema mismatch later. Without one (a team's project
    that ran protoc for the Python code only) the set is made from the generated code itself:
    the same message, without comments, so the table's columns carry no docs.
    """
    path = _descriptor_set_path(flow.message)
    if path is not None and path.exists():
        return load_descriptor_set(path, flow.message.DESCRIPTOR.file)
    return _generated_set(flow.message.DESCRIPTOR.file)


def _generated_set(file: FileDescriptor) -> bytes:
    """A FileDescriptorSet of file and its imports, imports first, from the generated code."""
    ordered: list[descriptor_pb2.FileDescriptorProto] = []
    seen: set[str] = set()

    def add(f: FileDescriptor) -> None:
        if f.name in seen:
            return
        seen.add(f.name)
        for dependency in f.dependencies:
            add(dependency)
        ordered.append(_generated(f))

    add(file)
    data: bytes = descriptor_pb2.FileDescriptorSet(file=ordered).SerializeToString()
    return data


def proto_source(flow: FlowSpec) -> Path:
    """The .proto file the flow's message was generated from (registered as its schema)."""
    path = _descriptor_set_path(flow.message)
    source = None if path is None else path.with_suffix(".proto")
    if source is None or not source.exists():
        raise DescriptorSetError(
            f"flow {flow.name}: the .proto of {flow.message.DESCRIPTOR.full_name} is not next to "
            f"its generated module (looked for {source})"
        )
    return source


def load_descriptor_set(path: Path, file: FileDescriptor) -> bytes:
    """The descriptor set at path, refused unless it holds `file` as its generated code has it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DescriptorSetError(f"{path} is missing: run `make protos`") from None
    if [_as_generated(f) for f in _files_named(data, file.name)] != [_generated(file)]:
        raise DescriptorSetError(
            f"{path} does not match {file.name} as generated: run `make protos`"
        )
    return data


def field_comments(message: type[Message]) -> Mapping[str, str]:
    """The .proto's comments on each field of message, by field name: the comment above the
    field and the one after it on its line, each made one line, the two on separate lines.
    Fields without comments are left out, and so is every field of a message without a
    descriptor set file (one built at run time); a stale descriptor set is refused
    (DescriptorSetError)."""
    if message not in _read_comments:
        _read_comments[message] = _field_comments(message)
    return _read_comments[message]


_read_comments: dict[type[Message], Mapping[str, str]] = {}
"""field_comments, once per message class (table_schema asks for them often)."""


def _field_comments(message: type[Message]) -> dict[str, str]:
    path = _descriptor_set_path(message)
    if path is None or not path.exists():
        return {}
    descriptor = message.DESCRIPTOR
    (file,) = _files_named(load_descriptor_set(path, descriptor.file), descriptor.file.name)
    message_path, proto = _message_proto(file, descriptor)
    names = {(*message_path, _FIELD, i): f.name for i, f in enumerate(proto.field)}
    comments: dict[str, str] = {}
    for location in file.source_code_info.location:
        name = names.get(tuple(location.path))
        blocks = (location.leading_comments, location.trailing_comments)
        text = "\n".join(" ".join(block.split()) for block in blocks if block.strip())
        if name is not None and text:
            comments[name] = text
    return comments


def _descriptor_set_path(message: type[Message]) -> Path | None:
    """`<name>.binpb` next to the module generated from `<name>.proto`; None, with one warning
    that its column docs are missing, when no loaded module defines the message (one built at
    run time)."""
    module = _generating_module(message)
    module_file = None if module is None else getattr(module, "__file__", None)
    if module_file is None:
        if message not in _undocumented:
            _undocumented.add(message)
            log.warning(
                "no generated module of %s found: its columns get no docs",
                message.DESCRIPTOR.full_name,
            )
        return None
    return Path(module_file).with_name(f"{Path(message.DESCRIPTOR.file.name).stem}.binpb")


_undocumented: set[type[Message]] = set()
"""Messages whose missing column docs were already warned about."""


def _generating_module(message: type[Message]) -> ModuleType | None:
    """The loaded module protoc generated for message's file: the one whose DESCRIPTOR that file
    is. Its `__module__` names it only when protoc was run from the import root: protoc names it
    after the .proto's path as compiled (`-I pkg` makes it `bar_pb2`, imported as `pkg.bar_pb2`)."""
    file = message.DESCRIPTOR.file
    named = sys.modules.get(message.__module__)
    modules = [named] if named is not None else []
    modules += list(sys.modules.values())
    # the module's own dict: getattr could run a lazy module's __getattr__
    return next((m for m in modules if getattr(m, "__dict__", {}).get("DESCRIPTOR") is file), None)


def _files_named(data: bytes, name: str) -> list[descriptor_pb2.FileDescriptorProto]:
    return [f for f in descriptor_pb2.FileDescriptorSet.FromString(data).file if f.name == name]


def _message_proto(
    file: descriptor_pb2.FileDescriptorProto, message: Descriptor
) -> tuple[tuple[int, ...], descriptor_pb2.DescriptorProto]:
    """The message's source_code_info path in file, and its DescriptorProto there."""
    if message.containing_type is None:
        path, siblings = (_MESSAGE_TYPE,), file.message_type
    else:
        outer_path, outer = _message_proto(file, message.containing_type)
        path, siblings = (*outer_path, _NESTED_TYPE), outer.nested_type
    index = next(i for i, m in enumerate(siblings) if m.name == message.name)
    return (*path, index), siblings[index]


def _generated(file: FileDescriptor) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    return proto


def _as_generated(
    file: descriptor_pb2.FileDescriptorProto,
) -> descriptor_pb2.FileDescriptorProto:
    """The file as generated code describes it: protoc fills json_name and (with
    --include_source_info) source_code_info in descriptor sets; generated code leaves both out."""
    file = descriptor_pb2.FileDescriptorProto.FromString(file.SerializeToString())
    file.ClearField("source_code_info")
    messages = list(file.message_type)
    while messages:
        message = messages.pop()
        for field in [*message.field, *message.extension]:
            field.ClearField("json_name")
        messages.extend(message.nested_type)
    return file
