import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from controller.api.gen.railyard.v1 import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TeFlow(_message.Message):
    __slots__ = ("src_address", "dst_address", "protocol", "src_port", "dst_port")
    SRC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DST_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    SRC_PORT_FIELD_NUMBER: _ClassVar[int]
    DST_PORT_FIELD_NUMBER: _ClassVar[int]
    src_address: str
    dst_address: str
    protocol: _common_pb2.Protocol
    src_port: int
    dst_port: int
    def __init__(self, src_address: _Optional[str] = ..., dst_address: _Optional[str] = ..., protocol: _Optional[_Union[_common_pb2.Protocol, str]] = ..., src_port: _Optional[int] = ..., dst_port: _Optional[int] = ...) -> None: ...

class TeDecision(_message.Message):
    __slots__ = ("kind", "subject", "reason", "at", "flow", "link", "from_via", "to_via", "programmed")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    FLOW_FIELD_NUMBER: _ClassVar[int]
    LINK_FIELD_NUMBER: _ClassVar[int]
    FROM_VIA_FIELD_NUMBER: _ClassVar[int]
    TO_VIA_FIELD_NUMBER: _ClassVar[int]
    PROGRAMMED_FIELD_NUMBER: _ClassVar[int]
    kind: str
    subject: str
    reason: str
    at: _timestamp_pb2.Timestamp
    flow: TeFlow
    link: str
    from_via: str
    to_via: str
    programmed: bool
    def __init__(self, kind: _Optional[str] = ..., subject: _Optional[str] = ..., reason: _Optional[str] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., flow: _Optional[_Union[TeFlow, _Mapping]] = ..., link: _Optional[str] = ..., from_via: _Optional[str] = ..., to_via: _Optional[str] = ..., programmed: _Optional[bool] = ...) -> None: ...

class WatchDecisionsResponse(_message.Message):
    __slots__ = ("decision",)
    DECISION_FIELD_NUMBER: _ClassVar[int]
    decision: TeDecision
    def __init__(self, decision: _Optional[_Union[TeDecision, _Mapping]] = ...) -> None: ...

class WatchDecisionsRequest(_message.Message):
    __slots__ = ("include_recent",)
    INCLUDE_RECENT_FIELD_NUMBER: _ClassVar[int]
    include_recent: bool
    def __init__(self, include_recent: _Optional[bool] = ...) -> None: ...
