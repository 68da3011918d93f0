from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class RangeData(_message.Message):
    __slots__ = ("min_key", "max_key", "estimated_size", "count")
    MIN_KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_KEY_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_SIZE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    min_key: bytes
    max_key: bytes
    estimated_size: int
    count: int
    def __init__(self, min_key: _Optional[bytes] = ..., max_key: _Optional[bytes] = ..., estimated_size: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...
