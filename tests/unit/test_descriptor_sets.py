"""The descriptor sets `make protos` builds, which the JVM decoder reads (no Spark needed)."""

import importlib
from pathlib import Path

import pytest
from flows.order_pb2 import Order
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from grpc_tools import protoc

from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.calls.call_events import CALL_EVENTS
from tidelake.streaming.flow.declared import FLOWS
from tidelake.streaming.flow.descriptor_set import (
    DescriptorSetError,
    descriptor_set,
    field_comments,
    load_descriptor_set,
    proto_source,
)
from tidelake.streaming.flow.spec import FlowSpec

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


def test_a_flow_without_a_descriptor_set_file_gets_one_from_its_generated_code(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A team's project may run protoc for the Python code only: the decoder still gets the
    message and its imports (here Timestamp's), without comments."""
    pool_file = descriptor_pb2.FileDescriptorProto(
        name="built/at_run_time.proto",
        package="built",
        dependency=["google/protobuf/timestamp.proto"],
        message_type=[
            descriptor_pb2.DescriptorProto(
                name="Ping",
                field=[
                    descriptor_pb2.FieldDescriptorProto(name="ping_id", number=1, type=9, label=1),
                    descriptor_pb2.FieldDescriptorProto(name="at_ms", number=2, type=3, label=1),
                    descriptor_pb2.FieldDescriptorProto(
                        name="sent",
                        number=3,
                        type=11,
                        label=1,
                        type_name=".google.protobuf.Timestamp",
                    ),
                ],
            )
        ],
    )
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(pool_file)
    ping = message_factory.GetMessageClass(pool.FindMessageTypeByName("built.Ping"))
    flow = FlowSpec(
        name="pings", message=ping, topic="pings", key_field="ping_id", event_time_field="at_ms"
    )
    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set(flow)).file
    assert [f.name for f in files] == ["google/protobuf/timestamp.proto", "built/at_run_time.proto"]
    assert not files[-1].source_code_info.location
    assert field_comments(ping) == {}
    descriptor_set(flow)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning == "no generated module of built.Ping found: its columns get no docs"


def test_descriptor_sets_keep_the_protos_comments_which_generated_code_lacks() -> None:
    data = descriptor_set(CALL_EVENTS)  # the check against the generated code ignores them
    (file,) = [
        f
        for f in descriptor_pb2.FileDescriptorSet.FromString(data).file
        if f.name.endswith("call.proto")
    ]
    assert file.source_code_info.location
    assert field_comments(CallEvent) == {
        "duration": "seconds",
        "event_time": "epoch milliseconds, UTC",
    }
    assert field_comments(Order)["order_id"] == (  # the comment above it, and the one after it
        "the shop's id of the order, unique across shops\nthe flow's key"
    )
    assert field_comments(Order.Line) == {"options": "packed inside a nested message"}


def test_a_flow_compiled_from_inside_its_package_folder_finds_its_descriptor_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`protoc -I team_orders ...` names the message's __module__ `bar_order_pb2`, which cannot be
    imported (the module is `team_orders.bar_order_pb2`): the docs are still found."""
    package = tmp_path / "team_orders"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "bar_order.proto").write_text(
        'syntax = "proto3";\npackage team_orders;\n'
        "message BarOrder {\n  // the bar's id of the order\n  string order_id = 1;\n"
        "  int64 placed_ms = 2;  // epoch milliseconds, UTC\n}\n"
    )
    generated = protoc.main(
        [
            "protoc",
            f"-I{package}",
            f"--python_out={package}",
            f"--descriptor_set_out={package / 'bar_order.binpb'}",
            "--include_source_info",
            "--include_imports",
            "bar_order.proto",
        ]
    )
    assert generated == 0
    monkeypatch.syspath_prepend(str(tmp_path))
    bar_order = importlib.import_module("team_orders.bar_order_pb2")
    assert bar_order.BarOrder.__module__ == "bar_order_pb2"
    flow = FlowSpec(
        name="bar_orders",
        message=bar_order.BarOrder,
        topic="bar_orders",
        key_field="order_id",
        event_time_field="placed_ms",
    )

    assert field_comments(bar_order.BarOrder) == {
        "order_id": "the bar's id of the order",
        "placed_ms": "epoch milliseconds, UTC",
    }
    assert descriptor_set(flow) == (package / "bar_order.binpb").read_bytes()
    assert proto_source(flow) == package / "bar_order.proto"
