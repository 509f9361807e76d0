import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from controller.api.gen.railyard.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HopRecord(_message.Message):
    __slots__ = ("switch", "egress_port", "queue_bytes", "tx_bps", "tx_bytes_total", "drops_total", "observe_time", "link_down")
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    EGRESS_PORT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TX_BPS_FIELD_NUMBER: _ClassVar[int]
    TX_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DROPS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    OBSERVE_TIME_FIELD_NUMBER: _ClassVar[int]
    LINK_DOWN_FIELD_NUMBER: _ClassVar[int]
    switch: str
    egress_port: int
    queue_bytes: int
    tx_bps: float
    tx_bytes_total: int
    drops_total: int
    observe_time: _timestamp_pb2.Timestamp
    link_down: bool
    def __init__(self, switch: _Optional[str] = ..., egress_port: _Optional[int] = ..., queue_bytes: _Optional[int] = ..., tx_bps: _Optional[float] = ..., tx_bytes_total: _Optional[int] = ..., drops_total: _Optional[int] = ..., observe_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., link_down: _Optional[bool] = ...) -> None: ...

class PathSignal(_message.Message):
    __slots__ = ("src_leaf", "spine", "dst_leaf", "min_available_bps", "max_queue_bytes", "bottleneck_switch", "bottleneck_port", "observe_time")
    SRC_LEAF_FIELD_NUMBER: _ClassVar[int]
    SPINE_FIELD_NUMBER: _ClassVar[int]
    DST_LEAF_FIELD_NUMBER: _ClassVar[int]
    MIN_AVAILABLE_BPS_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUE_BYTES_FIELD_NUMBER: _ClassVar[int]
    BOTTLENECK_SWITCH_FIELD_NUMBER: _ClassVar[int]
    BOTTLENECK_PORT_FIELD_NUMBER: _ClassVar[int]
    OBSERVE_TIME_FIELD_NUMBER: _ClassVar[int]
    src_leaf: str
    spine: str
    dst_leaf: str
    min_available_bps: float
    max_queue_bytes: int
    bottleneck_switch: str
    bottleneck_port: int
    observe_time: _timestamp_pb2.Timestamp
    def __init__(self, src_leaf: _Optional[str] = ..., spine: _Optional[str] = ..., dst_leaf: _Optional[str] = ..., min_available_bps: _Optional[float] = ..., max_queue_bytes: _Optional[int] = ..., bottleneck_switch: _Optional[str] = ..., bottleneck_port: _Optional[int] = ..., observe_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class FlowRecord(_message.Message):
    __slots__ = ("src_address", "dst_address", "protocol", "src_port", "dst_port", "bytes_total", "rate_bps", "observe_time", "ingress_leaf", "ingress_egress_port", "transit_switch", "transit_egress_port")
    SRC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DST_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    SRC_PORT_FIELD_NUMBER: _ClassVar[int]
    DST_PORT_FIELD_NUMBER: _ClassVar[int]
    BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RATE_BPS_FIELD_NUMBER: _ClassVar[int]
    OBSERVE_TIME_FIELD_NUMBER: _ClassVar[int]
    INGRESS_LEAF_FIELD_NUMBER: _ClassVar[int]
    INGRESS_EGRESS_PORT_FIELD_NUMBER: _ClassVar[int]
    TRANSIT_SWITCH_FIELD_NUMBER: _ClassVar[int]
    TRANSIT_EGRESS_PORT_FIELD_NUMBER: _ClassVar[int]
    src_address: str
    dst_address: str
    protocol: _common_pb2.Protocol
    src_port: int
    dst_port: int
    bytes_total: int
    rate_bps: float
    observe_time: _timestamp_pb2.Timestamp
    ingress_leaf: str
    ingress_egress_port: int
    transit_switch: str
    transit_egress_port: int
    def __init__(self, src_address: _Optional[str] = ..., dst_address: _Optional[str] = ..., protocol: _Optional[_Union[_common_pb2.Protocol, str]] = ..., src_port: _Optional[int] = ..., dst_port: _Optional[int] = ..., bytes_total: _Optional[int] = ..., rate_bps: _Optional[float] = ..., observe_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ingress_leaf: _Optional[str] = ..., ingress_egress_port: _Optional[int] = ..., transit_switch: _Optional[str] = ..., transit_egress_port: _Optional[int] = ...) -> None: ...

class TelemetryBatch(_message.Message):
    __slots__ = ("hops", "paths", "flows")
    HOPS_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    FLOWS_FIELD_NUMBER: _ClassVar[int]
    hops: _containers.RepeatedCompositeFieldContainer[HopRecord]
    paths: _containers.RepeatedCompositeFieldContainer[PathSignal]
    flows: _containers.RepeatedCompositeFieldContainer[FlowRecord]
    def __init__(self, hops: _Optional[_Iterable[_Union[HopRecord, _Mapping]]] = ..., paths: _Optional[_Iterable[_Union[PathSignal, _Mapping]]] = ..., flows: _Optional[_Iterable[_Union[FlowRecord, _Mapping]]] = ...) -> None: ...

class ReportTelemetryResponse(_message.Message):
    __slots__ = ("accepted_records", "rejected_records")
    ACCEPTED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    REJECTED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    accepted_records: int
    rejected_records: int
    def __init__(self, accepted_records: _Optional[int] = ..., rejected_records: _Optional[int] = ...) -> None: ...
