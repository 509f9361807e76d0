from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Protocol(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROTOCOL_UNSPECIFIED: _ClassVar[Protocol]
    PROTOCOL_TCP: _ClassVar[Protocol]
    PROTOCOL_UDP: _ClassVar[Protocol]
PROTOCOL_UNSPECIFIED: Protocol
PROTOCOL_TCP: Protocol
PROTOCOL_UDP: Protocol

class FlowMatch(_message.Message):
    __slots__ = ("src_address", "dst_address", "protocol", "src_port", "dst_port")
    SRC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DST_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    SRC_PORT_FIELD_NUMBER: _ClassVar[int]
    DST_PORT_FIELD_NUMBER: _ClassVar[int]
    src_address: str
    dst_address: str
    protocol: Protocol
    src_port: int
    dst_port: int
    def __init__(self, src_address: _Optional[str] = ..., dst_address: _Optional[str] = ..., protocol: _Optional[_Union[Protocol, str]] = ..., src_port: _Optional[int] = ..., dst_port: _Optional[int] = ...) -> None: ...

class FlowPin(_message.Message):
    __slots__ = ("name", "match", "spine", "forward_only")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    SPINE_FIELD_NUMBER: _ClassVar[int]
    FORWARD_ONLY_FIELD_NUMBER: _ClassVar[int]
    name: str
    match: FlowMatch
    spine: str
    forward_only: bool
    def __init__(self, name: _Optional[str] = ..., match: _Optional[_Union[FlowMatch, _Mapping]] = ..., spine: _Optional[str] = ..., forward_only: _Optional[bool] = ...) -> None: ...

class PinFlowRequest(_message.Message):
    __slots__ = ("pin",)
    PIN_FIELD_NUMBER: _ClassVar[int]
    pin: FlowPin
    def __init__(self, pin: _Optional[_Union[FlowPin, _Mapping]] = ...) -> None: ...

class PinFlowResponse(_message.Message):
    __slots__ = ("pin", "intent_revision")
    PIN_FIELD_NUMBER: _ClassVar[int]
    INTENT_REVISION_FIELD_NUMBER: _ClassVar[int]
    pin: FlowPin
    intent_revision: int
    def __init__(self, pin: _Optional[_Union[FlowPin, _Mapping]] = ..., intent_revision: _Optional[int] = ...) -> None: ...

class UnpinFlowRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class UnpinFlowResponse(_message.Message):
    __slots__ = ("pin", "intent_revision")
    PIN_FIELD_NUMBER: _ClassVar[int]
    INTENT_REVISION_FIELD_NUMBER: _ClassVar[int]
    pin: FlowPin
    intent_revision: int
    def __init__(self, pin: _Optional[_Union[FlowPin, _Mapping]] = ..., intent_revision: _Optional[int] = ...) -> None: ...

class ListPinsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListPinsResponse(_message.Message):
    __slots__ = ("pins", "next_page_token")
    PINS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    pins: _containers.RepeatedCompositeFieldContainer[FlowPin]
    next_page_token: str
    def __init__(self, pins: _Optional[_Iterable[_Union[FlowPin, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
