"""The descriptor sets `make protos` builds, which the JVM decoder reads (no Spark needed)."""

from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.flow.registry import FLOWS
from tidelake.streaming.records.decode import (
    DescriptorSetError,
    descriptor_set,
    load_descriptor_set,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flow", FLOWS.values(), ids=lambda f: f.name)
def test_every_flow_has_a_descriptor_set_holding_its_message(flow) -> None:
    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set(flow)).file
    package = flow.message.DESCRIPTOR.file.package
    messages = {
        f"{package}.{m.name}" for f in files if f.package == package for m in f.message_type
    }
    assert flow.message.DESCRIPTOR.full_name in messages


def test_a_stale_descriptor_set_is_refused_naming_the_fix(tmp_path: Path) -> None:
    built = descriptor_pb2.FileDescriptorSet.FromString((REPO / "protos/call.binpb").read_bytes())
    built.file[-1].message_type[0].field[2].number = 99  # as if the .proto changed since
    stale = tmp_path / "call.binpb"
    stale.write_bytes(built.SerializeToString())
    with pytest.raises(DescriptorSetError, match=r"does not match .*call.proto.*make protos"):
        load_descriptor_set(stale, CallEvent.DESCRIPTOR.file)


def test_a_missing_descriptor_set_is_refused_naming_the_fix(tmp_path: Path) -> None:
    with pytest.raises(DescriptorSetError, match=r"call.binpb is missing: run `make protos`"):
        load_descriptor_set(tmp_path / "call.binpb", CallEvent.DESCRIPTOR.file)
