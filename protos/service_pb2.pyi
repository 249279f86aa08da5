from tidelake.protos import call_pb2 as _call_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CallEventBatch(_message.Message):
    __slots__ = ("batch", "events")
    BATCH_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    batch: int
    events: _containers.RepeatedCompositeFieldContainer[_call_pb2.CallEvent]
    def __init__(self, batch: _Optional[int] = ..., events: _Optional[_Iterable[_Union[_call_pb2.CallEvent, _Mapping]]] = ...) -> None: ...

class TrackBatchResult(_message.Message):
    __slots__ = ("batch", "accepted", "refused")
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    batch: int
    accepted: int
    refused: _containers.RepeatedCompositeFieldContainer[TrackResult]
    def __init__(self, batch: _Optional[int] = ..., accepted: _Optional[int] = ..., refused: _Optional[_Iterable[_Union[TrackResult, _Mapping]]] = ...) -> None: ...

class TrackResult(_message.Message):
    __slots__ = ("index", "call_sid", "code", "message")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    CALL_SID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    index: int
    call_sid: str
    code: int
    message: str
    def __init__(self, index: _Optional[int] = ..., call_sid: _Optional[str] = ..., code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...
