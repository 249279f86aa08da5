"""What a protobuf field's type may become and still be read: one rule for two comparisons.

A flow's table compares the message it was written under with the flow's current message
(delta/evolution.py), and the stream compares a producer's registered schema with the flow's
message (schemas/writer_check.py). Both name types the same way and accept the same widenings.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor

_TYPE_NAMES = {
    value: name.removeprefix("TYPE_").lower()
    for name, value in vars(FieldDescriptor).items()
    if name.startswith("TYPE_") and isinstance(value, int)
}
WIDENINGS = {("int32", "int64"), ("sint32", "sint64"), ("uint32", "uint64"), ("uint32", "int64")}
"""Proto type changes that keep every value and its wire encoding."""


def type_name(f: FieldDescriptor) -> str:
    """The field's protobuf type ("int32", "string", "enum", "message"), "repeated " first if
    so."""
    name = _TYPE_NAMES[f.type]
    return f"repeated {name}" if f.is_repeated else name


def reads_as(written: str, read: str) -> bool:
    """Whether a value written as type `written` (type_name) reads correctly as `read`."""
    return written == read or (written, read) in WIDENINGS
