from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Order(_message.Message):
    __slots__ = ("order_id", "placed_at_ms", "ship_to", "coupons", "lines", "scores", "unpacked_scores", "attributes")
    class Address(_message.Message):
        __slots__ = ("city", "country", "floor")
        CITY_FIELD_NUMBER: _ClassVar[int]
        COUNTRY_FIELD_NUMBER: _ClassVar[int]
        FLOOR_FIELD_NUMBER: _ClassVar[int]
        city: str
        country: str
        floor: int
        def __init__(self, city: _Optional[str] = ..., country: _Optional[str] = ..., floor: _Optional[int] = ...) -> None: ...
    class Line(_message.Message):
        __slots__ = ("sku", "quantity", "kind", "options")
        class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            KIND_UNSPECIFIED: _ClassVar[Order.Line.Kind]
            GOODS: _ClassVar[Order.Line.Kind]
            SERVICE: _ClassVar[Order.Line.Kind]
        KIND_UNSPECIFIED: Order.Line.Kind
        GOODS: Order.Line.Kind
        SERVICE: Order.Line.Kind
        SKU_FIELD_NUMBER: _ClassVar[int]
        QUANTITY_FIELD_NUMBER: _ClassVar[int]
        KIND_FIELD_NUMBER: _ClassVar[int]
        OPTIONS_FIELD_NUMBER: _ClassVar[int]
        sku: str
        quantity: int
        kind: Order.Line.Kind
        options: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, sku: _Optional[str] = ..., quantity: _Optional[int] = ..., kind: _Optional[_Union[Order.Line.Kind, str]] = ..., options: _Optional[_Iterable[int]] = ...) -> None: ...
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ORDER_ID_FIELD_NUMBER: _ClassVar[int]
    PLACED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    SHIP_TO_FIELD_NUMBER: _ClassVar[int]
    COUPONS_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    UNPACKED_SCORES_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    order_id: str
    placed_at_ms: int
    ship_to: Order.Address
    coupons: _containers.RepeatedScalarFieldContainer[str]
    lines: _containers.RepeatedCompositeFieldContainer[Order.Line]
    scores: _containers.RepeatedScalarFieldContainer[int]
    unpacked_scores: _containers.RepeatedScalarFieldContainer[int]
    attributes: _containers.ScalarMap[str, int]
    def __init__(self, order_id: _Optional[str] = ..., placed_at_ms: _Optional[int] = ..., ship_to: _Optional[_Union[Order.Address, _Mapping]] = ..., coupons: _Optional[_Iterable[str]] = ..., lines: _Optional[_Iterable[_Union[Order.Line, _Mapping]]] = ..., scores: _Optional[_Iterable[int]] = ..., unpacked_scores: _Optional[_Iterable[int]] = ..., attributes: _Optional[_Mapping[str, int]] = ...) -> None: ...
