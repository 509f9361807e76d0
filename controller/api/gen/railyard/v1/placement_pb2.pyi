import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CollectivePattern(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COLLECTIVE_PATTERN_UNSPECIFIED: _ClassVar[CollectivePattern]
    COLLECTIVE_PATTERN_RING: _ClassVar[CollectivePattern]
    COLLECTIVE_PATTERN_TREE: _ClassVar[CollectivePattern]
    COLLECTIVE_PATTERN_ALL_TO_ALL: _ClassVar[CollectivePattern]

class JobView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_VIEW_UNSPECIFIED: _ClassVar[JobView]
    JOB_VIEW_SUMMARY: _ClassVar[JobView]
    JOB_VIEW_FULL: _ClassVar[JobView]
COLLECTIVE_PATTERN_UNSPECIFIED: CollectivePattern
COLLECTIVE_PATTERN_RING: CollectivePattern
COLLECTIVE_PATTERN_TREE: CollectivePattern
COLLECTIVE_PATTERN_ALL_TO_ALL: CollectivePattern
JOB_VIEW_UNSPECIFIED: JobView
JOB_VIEW_SUMMARY: JobView
JOB_VIEW_FULL: JobView

class PlaceJobRequest(_message.Message):
    __slots__ = ("job_id", "gpu_count", "gpus_per_server", "servers", "pattern", "flow_bandwidth_gbps", "max_pods", "exclusive_servers", "request_id", "view", "max_predicted_utilization", "validate_only", "qps_per_connection")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_SERVER_FIELD_NUMBER: _ClassVar[int]
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    FLOW_BANDWIDTH_GBPS_FIELD_NUMBER: _ClassVar[int]
    MAX_PODS_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_SERVERS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    MAX_PREDICTED_UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    QPS_PER_CONNECTION_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    gpu_count: int
    gpus_per_server: int
    servers: _containers.RepeatedScalarFieldContainer[str]
    pattern: CollectivePattern
    flow_bandwidth_gbps: float
    max_pods: int
    exclusive_servers: bool
    request_id: str
    view: JobView
    max_predicted_utilization: float
    validate_only: bool
    qps_per_connection: int
    def __init__(self, job_id: _Optional[str] = ..., gpu_count: _Optional[int] = ..., gpus_per_server: _Optional[int] = ..., servers: _Optional[_Iterable[str]] = ..., pattern: _Optional[_Union[CollectivePattern, str]] = ..., flow_bandwidth_gbps: _Optional[float] = ..., max_pods: _Optional[int] = ..., exclusive_servers: _Optional[bool] = ..., request_id: _Optional[str] = ..., view: _Optional[_Union[JobView, str]] = ..., max_predicted_utilization: _Optional[float] = ..., validate_only: _Optional[bool] = ..., qps_per_connection: _Optional[int] = ...) -> None: ...

class Gpu(_message.Message):
    __slots__ = ("rank", "server", "pod", "rail", "nic_address", "leaf", "node")
    RANK_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    RAIL_FIELD_NUMBER: _ClassVar[int]
    NIC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LEAF_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    rank: int
    server: str
    pod: int
    rail: int
    nic_address: str
    leaf: str
    node: str
    def __init__(self, rank: _Optional[int] = ..., server: _Optional[str] = ..., pod: _Optional[int] = ..., rail: _Optional[int] = ..., nic_address: _Optional[str] = ..., leaf: _Optional[str] = ..., node: _Optional[str] = ...) -> None: ...

class JobFlow(_message.Message):
    __slots__ = ("src_address", "dst_address", "bandwidth_gbps", "spine", "src_port")
    SRC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DST_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_GBPS_FIELD_NUMBER: _ClassVar[int]
    SPINE_FIELD_NUMBER: _ClassVar[int]
    SRC_PORT_FIELD_NUMBER: _ClassVar[int]
    src_address: str
    dst_address: str
    bandwidth_gbps: float
    spine: str
    src_port: int
    def __init__(self, src_address: _Optional[str] = ..., dst_address: _Optional[str] = ..., bandwidth_gbps: _Optional[float] = ..., spine: _Optional[str] = ..., src_port: _Optional[int] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "request", "gpus", "flows", "pods", "predicted_max_utilization_ratio", "place_time", "flow_count", "programmed_revision", "cross_cluster_share")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    FLOWS_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_MAX_UTILIZATION_RATIO_FIELD_NUMBER: _ClassVar[int]
    PLACE_TIME_FIELD_NUMBER: _ClassVar[int]
    FLOW_COUNT_FIELD_NUMBER: _ClassVar[int]
    PROGRAMMED_REVISION_FIELD_NUMBER: _ClassVar[int]
    CROSS_CLUSTER_SHARE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    request: PlaceJobRequest
    gpus: _containers.RepeatedCompositeFieldContainer[Gpu]
    flows: _containers.RepeatedCompositeFieldContainer[JobFlow]
    pods: _containers.RepeatedScalarFieldContainer[int]
    predicted_max_utilization_ratio: float
    place_time: _timestamp_pb2.Timestamp
    flow_count: int
    programmed_revision: int
    cross_cluster_share: float
    def __init__(self, job_id: _Optional[str] = ..., request: _Optional[_Union[PlaceJobRequest, _Mapping]] = ..., gpus: _Optional[_Iterable[_Union[Gpu, _Mapping]]] = ..., flows: _Optional[_Iterable[_Union[JobFlow, _Mapping]]] = ..., pods: _Optional[_Iterable[int]] = ..., predicted_max_utilization_ratio: _Optional[float] = ..., place_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., flow_count: _Optional[int] = ..., programmed_revision: _Optional[int] = ..., cross_cluster_share: _Optional[float] = ...) -> None: ...

class PlaceJobResponse(_message.Message):
    __slots__ = ("job", "created", "oversubscribed", "validated_only")
    JOB_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    OVERSUBSCRIBED_FIELD_NUMBER: _ClassVar[int]
    VALIDATED_ONLY_FIELD_NUMBER: _ClassVar[int]
    job: Job
    created: bool
    oversubscribed: bool
    validated_only: bool
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., created: _Optional[bool] = ..., oversubscribed: _Optional[bool] = ..., validated_only: _Optional[bool] = ...) -> None: ...

class CandidatePlacement(_message.Message):
    __slots__ = ("servers",)
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    servers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, servers: _Optional[_Iterable[str]] = ...) -> None: ...

class ScorePlacementsRequest(_message.Message):
    __slots__ = ("job", "candidates")
    JOB_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    job: PlaceJobRequest
    candidates: _containers.RepeatedCompositeFieldContainer[CandidatePlacement]
    def __init__(self, job: _Optional[_Union[PlaceJobRequest, _Mapping]] = ..., candidates: _Optional[_Iterable[_Union[CandidatePlacement, _Mapping]]] = ...) -> None: ...

class PlacementScore(_message.Message):
    __slots__ = ("candidate", "feasible", "reason", "predicted_max_utilization_ratio", "spine_tier_peak_ratio", "score", "rank", "cross_cluster_share")
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    FEASIBLE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_MAX_UTILIZATION_RATIO_FIELD_NUMBER: _ClassVar[int]
    SPINE_TIER_PEAK_RATIO_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    CROSS_CLUSTER_SHARE_FIELD_NUMBER: _ClassVar[int]
    candidate: int
    feasible: bool
    reason: str
    predicted_max_utilization_ratio: float
    spine_tier_peak_ratio: float
    score: float
    rank: int
    cross_cluster_share: float
    def __init__(self, candidate: _Optional[int] = ..., feasible: _Optional[bool] = ..., reason: _Optional[str] = ..., predicted_max_utilization_ratio: _Optional[float] = ..., spine_tier_peak_ratio: _Optional[float] = ..., score: _Optional[float] = ..., rank: _Optional[int] = ..., cross_cluster_share: _Optional[float] = ...) -> None: ...

class ScorePlacementsResponse(_message.Message):
    __slots__ = ("scores", "intent_revision")
    SCORES_FIELD_NUMBER: _ClassVar[int]
    INTENT_REVISION_FIELD_NUMBER: _ClassVar[int]
    scores: _containers.RepeatedCompositeFieldContainer[PlacementScore]
    intent_revision: int
    def __init__(self, scores: _Optional[_Iterable[_Union[PlacementScore, _Mapping]]] = ..., intent_revision: _Optional[int] = ...) -> None: ...

class ReleaseJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ReleaseJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id", "view")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    view: JobView
    def __init__(self, job_id: _Optional[str] = ..., view: _Optional[_Union[JobView, str]] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "view")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    view: JobView
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., view: _Optional[_Union[JobView, str]] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token", "intent_revision")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INTENT_REVISION_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    intent_revision: int
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., intent_revision: _Optional[int] = ...) -> None: ...

class WatchJobsRequest(_message.Message):
    __slots__ = ("since_revision", "include_programmed")
    SINCE_REVISION_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PROGRAMMED_FIELD_NUMBER: _ClassVar[int]
    since_revision: int
    include_programmed: bool
    def __init__(self, since_revision: _Optional[int] = ..., include_programmed: _Optional[bool] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("kind", "job", "intent_revision")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[JobEvent.Kind]
        KIND_PLACED: _ClassVar[JobEvent.Kind]
        KIND_PATHS_MOVED: _ClassVar[JobEvent.Kind]
        KIND_RELEASED: _ClassVar[JobEvent.Kind]
        KIND_PROGRAMMED: _ClassVar[JobEvent.Kind]
    KIND_UNSPECIFIED: JobEvent.Kind
    KIND_PLACED: JobEvent.Kind
    KIND_PATHS_MOVED: JobEvent.Kind
    KIND_RELEASED: JobEvent.Kind
    KIND_PROGRAMMED: JobEvent.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    INTENT_REVISION_FIELD_NUMBER: _ClassVar[int]
    kind: JobEvent.Kind
    job: Job
    intent_revision: int
    def __init__(self, kind: _Optional[_Union[JobEvent.Kind, str]] = ..., job: _Optional[_Union[Job, _Mapping]] = ..., intent_revision: _Optional[int] = ...) -> None: ...

class ListJobFlowsRequest(_message.Message):
    __slots__ = ("job_id", "page_size", "page_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    page_size: int
    page_token: str
    def __init__(self, job_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListJobFlowsResponse(_message.Message):
    __slots__ = ("flows", "next_page_token", "intent_revision")
    FLOWS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INTENT_REVISION_FIELD_NUMBER: _ClassVar[int]
    flows: _containers.RepeatedCompositeFieldContainer[JobFlow]
    next_page_token: str
    intent_revision: int
    def __init__(self, flows: _Optional[_Iterable[_Union[JobFlow, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., intent_revision: _Optional[int] = ...) -> None: ...
