from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PageView(_message.Message):
    __slots__ = ("view_id", "user", "url", "viewed_at_s", "bounced", "load_ms", "device", "referrer", "scroll_percent")
    class Device(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEVICE_UNSPECIFIED: _ClassVar[PageView.Device]
        DESKTOP: _ClassVar[PageView.Device]
        MOBILE: _ClassVar[PageView.Device]
    DEVICE_UNSPECIFIED: PageView.Device
    DESKTOP: PageView.Device
    MOBILE: PageView.Device
    VIEW_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    VIEWED_AT_S_FIELD_NUMBER: _ClassVar[int]
    BOUNCED_FIELD_NUMBER: _ClassVar[int]
    LOAD_MS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    REFERRER_FIELD_NUMBER: _ClassVar[int]
    SCROLL_PERCENT_FIELD_NUMBER: _ClassVar[int]
    view_id: str
    user: str
    url: str
    viewed_at_s: int
    bounced: bool
    load_ms: float
    device: PageView.Device
    referrer: str
    scroll_percent: int
    def __init__(self, view_id: _Optional[str] = ..., user: _Optional[str] = ..., url: _Optional[str] = ..., viewed_at_s: _Optional[int] = ..., bounced: _Optional[bool] = ..., load_ms: _Optional[float] = ..., device: _Optional[_Union[PageView.Device, str]] = ..., referrer: _Optional[str] = ..., scroll_percent: _Optional[int] = ...) -> None: ...
