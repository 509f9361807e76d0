import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from controller.api.gen.railyard.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FlowMatch(_message.Message):
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

class GetFabricRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Switch(_message.Message):
    __slots__ = ("name", "tier", "pod", "rail", "dpid", "connected", "drained")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    RAIL_FIELD_NUMBER: _ClassVar[int]
    DPID_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    DRAINED_FIELD_NUMBER: _ClassVar[int]
    name: str
    tier: str
    pod: int
    rail: int
    dpid: str
    connected: bool
    drained: bool
    def __init__(self, name: _Optional[str] = ..., tier: _Optional[str] = ..., pod: _Optional[int] = ..., rail: _Optional[int] = ..., dpid: _Optional[str] = ..., connected: _Optional[bool] = ..., drained: _Optional[bool] = ...) -> None: ...

class GetFabricResponse(_message.Message):
    __slots__ = ("name", "kind", "gpu_count", "rails", "pods", "nic_gbps", "switches", "free_gpu_count", "pod_capacity")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    RAILS_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    NIC_GBPS_FIELD_NUMBER: _ClassVar[int]
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    FREE_GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    POD_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    gpu_count: int
    rails: int
    pods: int
    nic_gbps: float
    switches: _containers.RepeatedCompositeFieldContainer[Switch]
    free_gpu_count: int
    pod_capacity: _containers.RepeatedCompositeFieldContainer[PodCapacity]
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., gpu_count: _Optional[int] = ..., rails: _Optional[int] = ..., pods: _Optional[int] = ..., nic_gbps: _Optional[float] = ..., switches: _Optional[_Iterable[_Union[Switch, _Mapping]]] = ..., free_gpu_count: _Optional[int] = ..., pod_capacity: _Optional[_Iterable[_Union[PodCapacity, _Mapping]]] = ...) -> None: ...

class PodCapacity(_message.Message):
    __slots__ = ("pod", "gpu_count", "free_gpu_count", "whole_free_servers", "partly_free_servers")
    POD_FIELD_NUMBER: _ClassVar[int]
    GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    FREE_GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    WHOLE_FREE_SERVERS_FIELD_NUMBER: _ClassVar[int]
    PARTLY_FREE_SERVERS_FIELD_NUMBER: _ClassVar[int]
    pod: int
    gpu_count: int
    free_gpu_count: int
    whole_free_servers: int
    partly_free_servers: int
    def __init__(self, pod: _Optional[int] = ..., gpu_count: _Optional[int] = ..., free_gpu_count: _Optional[int] = ..., whole_free_servers: _Optional[int] = ..., partly_free_servers: _Optional[int] = ...) -> None: ...

class ServerCapacity(_message.Message):
    __slots__ = ("server", "pod", "index", "gpu_count", "free_gpu_count", "free_rails", "exclusive", "node")
    SERVER_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    FREE_GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    FREE_RAILS_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    server: str
    pod: int
    index: int
    gpu_count: int
    free_gpu_count: int
    free_rails: _containers.RepeatedScalarFieldContainer[int]
    exclusive: bool
    node: str
    def __init__(self, server: _Optional[str] = ..., pod: _Optional[int] = ..., index: _Optional[int] = ..., gpu_count: _Optional[int] = ..., free_gpu_count: _Optional[int] = ..., free_rails: _Optional[_Iterable[int]] = ..., exclusive: _Optional[bool] = ..., node: _Optional[str] = ...) -> None: ...

class GetFreeCapacityRequest(_message.Message):
    __slots__ = ("pods", "include_full_servers")
    PODS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FULL_SERVERS_FIELD_NUMBER: _ClassVar[int]
    pods: _containers.RepeatedScalarFieldContainer[int]
    include_full_servers: bool
    def __init__(self, pods: _Optional[_Iterable[int]] = ..., include_full_servers: _Optional[bool] = ...) -> None: ...

class GetFreeCapacityResponse(_message.Message):
    __slots__ = ("gpu_count", "free_gpu_count", "whole_free_servers", "partly_free_servers", "pods", "servers", "intent_revision")
    GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    FREE_GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    WHOLE_FREE_SERVERS_FIELD_NUMBER: _ClassVar[int]
    PARTLY_FREE_SERVERS_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    INTENT_REVISION_FIELD_NUMBER: _ClassVar[int]
    gpu_count: int
    free_gpu_count: int
    whole_free_servers: int
    partly_free_servers: int
    pods: _containers.RepeatedCompositeFieldContainer[PodCapacity]
    servers: _containers.RepeatedCompositeFieldContainer[ServerCapacity]
    intent_revision: int
    def __init__(self, gpu_count: _Optional[int] = ..., free_gpu_count: _Optional[int] = ..., whole_free_servers: _Optional[int] = ..., partly_free_servers: _Optional[int] = ..., pods: _Optional[_Iterable[_Union[PodCapacity, _Mapping]]] = ..., servers: _Optional[_Iterable[_Union[ServerCapacity, _Mapping]]] = ..., intent_revision: _Optional[int] = ...) -> None: ...

class LinkDirection(_message.Message):
    __slots__ = ("from_node", "from_port", "predicted_bps", "measured_bps", "utilization_ratio", "queue_bytes", "measure_time")
    FROM_NODE_FIELD_NUMBER: _ClassVar[int]
    FROM_PORT_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_BPS_FIELD_NUMBER: _ClassVar[int]
    MEASURED_BPS_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_RATIO_FIELD_NUMBER: _ClassVar[int]
    QUEUE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEASURE_TIME_FIELD_NUMBER: _ClassVar[int]
    from_node: str
    from_port: int
    predicted_bps: float
    measured_bps: float
    utilization_ratio: float
    queue_bytes: int
    measure_time: _timestamp_pb2.Timestamp
    def __init__(self, from_node: _Optional[str] = ..., from_port: _Optional[int] = ..., predicted_bps: _Optional[float] = ..., measured_bps: _Optional[float] = ..., utilization_ratio: _Optional[float] = ..., queue_bytes: _Optional[int] = ..., measure_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Link(_message.Message):
    __slots__ = ("name", "a_node", "a_port", "b_node", "b_port", "capacity_bps", "access", "drained", "directions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    A_NODE_FIELD_NUMBER: _ClassVar[int]
    A_PORT_FIELD_NUMBER: _ClassVar[int]
    B_NODE_FIELD_NUMBER: _ClassVar[int]
    B_PORT_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BPS_FIELD_NUMBER: _ClassVar[int]
    ACCESS_FIELD_NUMBER: _ClassVar[int]
    DRAINED_FIELD_NUMBER: _ClassVar[int]
    DIRECTIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    a_node: str
    a_port: int
    b_node: str
    b_port: int
    capacity_bps: float
    access: bool
    drained: bool
    directions: _containers.RepeatedCompositeFieldContainer[LinkDirection]
    def __init__(self, name: _Optional[str] = ..., a_node: _Optional[str] = ..., a_port: _Optional[int] = ..., b_node: _Optional[str] = ..., b_port: _Optional[int] = ..., capacity_bps: _Optional[float] = ..., access: _Optional[bool] = ..., drained: _Optional[bool] = ..., directions: _Optional[_Iterable[_Union[LinkDirection, _Mapping]]] = ...) -> None: ...

class ListLinksRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "switch", "include_access")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ACCESS_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    switch: str
    include_access: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., switch: _Optional[str] = ..., include_access: _Optional[bool] = ...) -> None: ...

class ListLinksResponse(_message.Message):
    __slots__ = ("links", "next_page_token")
    LINKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    links: _containers.RepeatedCompositeFieldContainer[Link]
    next_page_token: str
    def __init__(self, links: _Optional[_Iterable[_Union[Link, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DrainLinkRequest(_message.Message):
    __slots__ = ("link",)
    LINK_FIELD_NUMBER: _ClassVar[int]
    link: str
    def __init__(self, link: _Optional[str] = ...) -> None: ...

class DrainLinkResponse(_message.Message):
    __slots__ = ("link", "rerouted_job_ids", "intent_revision")
    LINK_FIELD_NUMBER: _ClassVar[int]
    REROUTED_JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    INTENT_REVISION_FIELD_NUMBER: _ClassVar[int]
    link: str
    rerouted_job_ids: _containers.RepeatedScalarFieldContainer[str]
    intent_revision: int
    def __init__(self, link: _Optional[str] = ..., rerouted_job_ids: _Optional[_Iterable[str]] = ..., intent_revision: _Optional[int] = ...) -> None: ...

class UndrainLinkRequest(_message.Message):
    __slots__ = ("link",)
    LINK_FIELD_NUMBER: _ClassVar[int]
    link: str
    def __init__(self, link: _Optional[str] = ...) -> None: ...

class UndrainLinkResponse(_message.Message):
    __slots__ = ("link", "intent_revision")
    LINK_FIELD_NUMBER: _ClassVar[int]
    INTENT_REVISION_FIELD_NUMBER: _ClassVar[int]
    link: str
    intent_revision: int
    def __init__(self, link: _Optional[str] = ..., intent_revision: _Optional[int] = ...) -> None: ...

class DrainSwitchRequest(_message.Message):
    __slots__ = ("switch",)
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    switch: str
    def __init__(self, switch: _Optional[str] = ...) -> None: ...

class DrainSwitchResponse(_message.Message):
    __slots__ = ("switch", "rerouted_job_ids", "intent_revision")
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    REROUTED_JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    INTENT_REVISION_FIELD_NUMBER: _ClassVar[int]
    switch: str
    rerouted_job_ids: _containers.RepeatedScalarFieldContainer[str]
    intent_revision: int
    def __init__(self, switch: _Optional[str] = ..., rerouted_job_ids: _Optional[_Iterable[str]] = ..., intent_revision: _Optional[int] = ...) -> None: ...

class UndrainSwitchRequest(_message.Message):
    __slots__ = ("switch",)
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    switch: str
    def __init__(self, switch: _Optional[str] = ...) -> None: ...

class UndrainSwitchResponse(_message.Message):
    __slots__ = ("switch", "intent_revision")
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    INTENT_REVISION_FIELD_NUMBER: _ClassVar[int]
    switch: str
    intent_revision: int
    def __init__(self, switch: _Optional[str] = ..., intent_revision: _Optional[int] = ...) -> None: ...
