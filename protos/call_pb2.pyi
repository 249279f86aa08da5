from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CallEvent(_message.Message):
    __slots__ = ("call_sid", "account_sid", "duration", "call_state", "region", "event_time")
    class CallState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        unknown_state: _ClassVar[CallEvent.CallState]
        completed: _ClassVar[CallEvent.CallState]
        failed: _ClassVar[CallEvent.CallState]
    unknown_state: CallEvent.CallState
    completed: CallEvent.CallState
    failed: CallEvent.CallState
    class Region(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        unknown_region: _ClassVar[CallEvent.Region]
        us1: _ClassVar[CallEvent.Region]
        us2: _ClassVar[CallEvent.Region]
        de1: _ClassVar[CallEvent.Region]
    unknown_region: CallEvent.Region
    us1: CallEvent.Region
    us2: CallEvent.Region
    de1: CallEvent.Region
    CALL_SID_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_SID_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    CALL_STATE_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    call_sid: str
    account_sid: str
    duration: int
    call_state: CallEvent.CallState
    region: CallEvent.Region
    event_time: int
    def __init__(self, call_sid: _Optional[str] = ..., account_sid: _Optional[str] = ..., duration: _Optional[int] = ..., call_state: _Optional[_Union[CallEvent.CallState, str]] = ..., region: _Optional[_Union[CallEvent.Region, str]] = ..., event_time: _Optional[int] = ...) -> None: ...

class CallSid(_message.Message):
    __slots__ = ("call_sid",)
    CALL_SID_FIELD_NUMBER: _ClassVar[int]
    call_sid: str
    def __init__(self, call_sid: _Optional[str] = ...) -> None: ...
