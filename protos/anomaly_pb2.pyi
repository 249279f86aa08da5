from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class CallAnomaly(_message.Message):
    __slots__ = ("key_kind", "key", "window_start", "window_end", "metric", "observed", "expected", "score", "model_version")
    KEY_KIND_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    key_kind: str
    key: str
    window_start: int
    window_end: int
    metric: str
    observed: float
    expected: float
    score: float
    model_version: int
    def __init__(self, key_kind: _Optional[str] = ..., key: _Optional[str] = ..., window_start: _Optional[int] = ..., window_end: _Optional[int] = ..., metric: _Optional[str] = ..., observed: _Optional[float] = ..., expected: _Optional[float] = ..., score: _Optional[float] = ..., model_version: _Optional[int] = ...) -> None: ...
