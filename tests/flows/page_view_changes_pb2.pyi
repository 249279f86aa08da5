from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Device(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEVICE_UNSPECIFIED: _ClassVar[Device]
    DESKTOP: _ClassVar[Device]
    MOBILE: _ClassVar[Device]
    TABLET: _ClassVar[Device]
DEVICE_UNSPECIFIED: Device
DESKTOP: Device
MOBILE: Device
TABLET: Device

class PageViewWithCountry(_message.Message):
    __slots__ = ("view_id", "user", "url", "viewed_at_s", "bounced", "load_ms", "device", "referrer", "scroll_percent", "country", "clicks")
    VIEW_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    VIEWED_AT_S_FIELD_NUMBER: _ClassVar[int]
    BOUNCED_FIELD_NUMBER: _ClassVar[int]
    LOAD_MS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    REFERRER_FIELD_NUMBER: _ClassVar[int]
    SCROLL_PERCENT_FIELD_NUMBER: _ClassVar[int]
    COUNTRY_FIELD_NUMBER: _ClassVar[int]
    CLICKS_FIELD_NUMBER: _ClassVar[int]
    view_id: str
    user: str
    url: str
    viewed_at_s: int
    bounced: bool
    load_ms: float
    device: Device
    referrer: str
    scroll_percent: int
    country: str
    clicks: int
    def __init__(self, view_id: _Optional[str] = ..., user: _Optional[str] = ..., url: _Optional[str] = ..., viewed_at_s: _Optional[int] = ..., bounced: _Optional[bool] = ..., load_ms: _Optional[float] = ..., device: _Optional[_Union[Device, str]] = ..., referrer: _Optional[str] = ..., scroll_percent: _Optional[int] = ..., country: _Optional[str] = ..., clicks: _Optional[int] = ...) -> None: ...

class PageViewWidened(_message.Message):
    __slots__ = ("view_id", "user", "url", "viewed_at_s", "bounced", "load_ms", "device", "referrer", "scroll_percent")
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
    device: Device
    referrer: str
    scroll_percent: int
    def __init__(self, view_id: _Optional[str] = ..., user: _Optional[str] = ..., url: _Optional[str] = ..., viewed_at_s: _Optional[int] = ..., bounced: _Optional[bool] = ..., load_ms: _Optional[float] = ..., device: _Optional[_Union[Device, str]] = ..., referrer: _Optional[str] = ..., scroll_percent: _Optional[int] = ...) -> None: ...

class PageViewLoadAsText(_message.Message):
    __slots__ = ("view_id", "user", "url", "viewed_at_s", "bounced", "load_ms", "device", "referrer", "scroll_percent")
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
    load_ms: str
    device: Device
    referrer: str
    scroll_percent: int
    def __init__(self, view_id: _Optional[str] = ..., user: _Optional[str] = ..., url: _Optional[str] = ..., viewed_at_s: _Optional[int] = ..., bounced: _Optional[bool] = ..., load_ms: _Optional[str] = ..., device: _Optional[_Union[Device, str]] = ..., referrer: _Optional[str] = ..., scroll_percent: _Optional[int] = ...) -> None: ...

class PageViewReusedNumber(_message.Message):
    __slots__ = ("view_id", "user", "url", "viewed_at_s", "tabs_open", "load_ms", "device", "referrer", "scroll_percent")
    VIEW_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    VIEWED_AT_S_FIELD_NUMBER: _ClassVar[int]
    TABS_OPEN_FIELD_NUMBER: _ClassVar[int]
    LOAD_MS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    REFERRER_FIELD_NUMBER: _ClassVar[int]
    SCROLL_PERCENT_FIELD_NUMBER: _ClassVar[int]
    view_id: str
    user: str
    url: str
    viewed_at_s: int
    tabs_open: int
    load_ms: float
    device: Device
    referrer: str
    scroll_percent: int
    def __init__(self, view_id: _Optional[str] = ..., user: _Optional[str] = ..., url: _Optional[str] = ..., viewed_at_s: _Optional[int] = ..., tabs_open: _Optional[int] = ..., load_ms: _Optional[float] = ..., device: _Optional[_Union[Device, str]] = ..., referrer: _Optional[str] = ..., scroll_percent: _Optional[int] = ...) -> None: ...

class PageViewWithoutUser(_message.Message):
    __slots__ = ("view_id", "url", "viewed_at_s", "bounced", "load_ms", "device", "referrer", "scroll_percent")
    VIEW_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    VIEWED_AT_S_FIELD_NUMBER: _ClassVar[int]
    BOUNCED_FIELD_NUMBER: _ClassVar[int]
    LOAD_MS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    REFERRER_FIELD_NUMBER: _ClassVar[int]
    SCROLL_PERCENT_FIELD_NUMBER: _ClassVar[int]
    view_id: str
    url: str
    viewed_at_s: int
    bounced: bool
    load_ms: float
    device: Device
    referrer: str
    scroll_percent: int
    def __init__(self, view_id: _Optional[str] = ..., url: _Optional[str] = ..., viewed_at_s: _Optional[int] = ..., bounced: _Optional[bool] = ..., load_ms: _Optional[float] = ..., device: _Optional[_Union[Device, str]] = ..., referrer: _Optional[str] = ..., scroll_percent: _Optional[int] = ...) -> None: ...

class PageViewKeyRenamed(_message.Message):
    __slots__ = ("id", "user", "url", "viewed_at_s", "bounced", "load_ms", "device", "referrer", "scroll_percent")
    ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    VIEWED_AT_S_FIELD_NUMBER: _ClassVar[int]
    BOUNCED_FIELD_NUMBER: _ClassVar[int]
    LOAD_MS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    REFERRER_FIELD_NUMBER: _ClassVar[int]
    SCROLL_PERCENT_FIELD_NUMBER: _ClassVar[int]
    id: str
    user: str
    url: str
    viewed_at_s: int
    bounced: bool
    load_ms: float
    device: Device
    referrer: str
    scroll_percent: int
    def __init__(self, id: _Optional[str] = ..., user: _Optional[str] = ..., url: _Optional[str] = ..., viewed_at_s: _Optional[int] = ..., bounced: _Optional[bool] = ..., load_ms: _Optional[float] = ..., device: _Optional[_Union[Device, str]] = ..., referrer: _Optional[str] = ..., scroll_percent: _Optional[int] = ...) -> None: ...

class PageViewTimeRenamed(_message.Message):
    __slots__ = ("view_id", "user", "url", "seen_at_s", "bounced", "load_ms", "device", "referrer", "scroll_percent")
    VIEW_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    SEEN_AT_S_FIELD_NUMBER: _ClassVar[int]
    BOUNCED_FIELD_NUMBER: _ClassVar[int]
    LOAD_MS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    REFERRER_FIELD_NUMBER: _ClassVar[int]
    SCROLL_PERCENT_FIELD_NUMBER: _ClassVar[int]
    view_id: str
    user: str
    url: str
    seen_at_s: int
    bounced: bool
    load_ms: float
    device: Device
    referrer: str
    scroll_percent: int
    def __init__(self, view_id: _Optional[str] = ..., user: _Optional[str] = ..., url: _Optional[str] = ..., seen_at_s: _Optional[int] = ..., bounced: _Optional[bool] = ..., load_ms: _Optional[float] = ..., device: _Optional[_Union[Device, str]] = ..., referrer: _Optional[str] = ..., scroll_percent: _Optional[int] = ...) -> None: ...

class PageViewWithoutUrl(_message.Message):
    __slots__ = ("view_id", "user", "viewed_at_s", "bounced", "load_ms", "device", "referrer", "scroll_percent")
    VIEW_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    VIEWED_AT_S_FIELD_NUMBER: _ClassVar[int]
    BOUNCED_FIELD_NUMBER: _ClassVar[int]
    LOAD_MS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    REFERRER_FIELD_NUMBER: _ClassVar[int]
    SCROLL_PERCENT_FIELD_NUMBER: _ClassVar[int]
    view_id: str
    user: str
    viewed_at_s: int
    bounced: bool
    load_ms: float
    device: Device
    referrer: str
    scroll_percent: int
    def __init__(self, view_id: _Optional[str] = ..., user: _Optional[str] = ..., viewed_at_s: _Optional[int] = ..., bounced: _Optional[bool] = ..., load_ms: _Optional[float] = ..., device: _Optional[_Union[Device, str]] = ..., referrer: _Optional[str] = ..., scroll_percent: _Optional[int] = ...) -> None: ...
