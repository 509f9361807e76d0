from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class Protocol(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROTOCOL_UNSPECIFIED: _ClassVar[Protocol]
    PROTOCOL_TCP: _ClassVar[Protocol]
    PROTOCOL_UDP: _ClassVar[Protocol]
PROTOCOL_UNSPECIFIED: Protocol
PROTOCOL_TCP: Protocol
PROTOCOL_UDP: Protocol
