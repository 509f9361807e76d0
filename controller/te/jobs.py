"""Jobs: what a scheduler asks for and what Railyard gave it. Pure data.

A job's GPUs are rail-aligned: local rank g on every server of the job sits
on rail g, so the collective's cross-server traffic for rank g stays on rail
g's leaves and the spines of its plane (the premise of a rail-optimized
fabric). A job takes `gpus_per_server` GPUs (k of them, the same k rails on
every server: placement chooses which) on each of gpu_count / k servers.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from controller.errors import NAME_RULE, FieldError, shown, valid_name
from controller.fabric import Fabric, NicId
from controller.fabric import addressing as ad

MAX_QPS = 16  # queue pairs per connection: E-ECMP spreads a connection over up to this many
# The UDP source ports placement names for queue pairs: RoCEv2's own range
# (the kernel derives a QP's port from its flow label into 0xC000-0xFFFF).
QP_PORTS = range(0xC000, 0x10000)


class JobError(FieldError):
    context = "job"


class Pattern(str, enum.Enum):
    RING = "ring"  # ring all-reduce: server i -> i+1 on every rail
    TREE = "tree"  # binary-tree reduce + broadcast: child <-> parent on every rail
    ALL_TO_ALL = "all-to-all"  # every server -> every other server on every rail


@dataclass(frozen=True)
class JobRequest:
    job_id: str
    gpu_count: int
    pattern: Pattern
    flow_gbps: float  # demand of each flow of the pattern, in the real fabric's units
    gpus_per_server: int = 0  # 0: min(gpu_count, rails)
    servers: tuple[str, ...] = ()  # explicit servers; empty: Railyard chooses
    max_pods: int = 0  # 0: no limit
    exclusive: bool = False  # no other job may share these servers
    request_id: str = ""
    # The most the placement may predict on any link, as a share of it (0: no
    # limit): a scheduler that would rather wait than oversubscribe says so.
    max_predicted_utilization: float = 0.0
    # Queue pairs per connection (NCCL_IB_QPS_PER_CONNECTION): each QP is a
    # flow of its own to the fabric, with its own source port.
    qps_per_connection: int = 1

    def per_server(self, rails: int) -> int:
        return self.gpus_per_server or min(self.gpu_count, rails)

    def server_count(self, rails: int) -> int:
        return self.gpu_count // self.per_server(rails)


@dataclass(frozen=True, order=True)
class Gpu:
    rank: int
    nic: NicId  # the GPU's NIC: its rail is the GPU's local rank on the server


@dataclass(frozen=True, order=True)
class JobFlow:
    """A flow of the job's collective: one connection, or with
    `qps_per_connection` one of its queue pairs."""

    src: NicId
    dst: NicId
    demand_bps: float
    via: str = ""  # spine (or fat-tree core) the flow is placed on; "" when src and dst share a leaf
    # The UDP source port the sending NIC gives this QP (mlx5dv_modify_qp_udp_sport),
    # named where a connection's QPs were placed across spines so the switches
    # can tell them apart and pin each; 0: the NIC's own (the pair is pinned whole, or hashed).
    src_port: int = 0


@dataclass(frozen=True)
class Job:
    request: JobRequest
    gpus: tuple[Gpu, ...]
    flows: tuple[JobFlow, ...]
    predicted_max_utilization: float
    placed_at: float  # unix seconds, given by the caller (the core never reads a clock)
    # Of the flows' demand (bps), the share between clusters: on the thin
    # core of a three-tier fabric. 0 with one cluster.
    cross_cluster_share: float = 0.0

    @property
    def job_id(self) -> str:
        return self.request.job_id

    @property
    def pods(self) -> tuple[int, ...]:
        return tuple(sorted({g.nic.pod for g in self.gpus}))

    def server_keys(self) -> set[tuple[int, int]]:
        return {(g.nic.pod, g.nic.server) for g in self.gpus}

    @property
    def pinned(self) -> dict[tuple[NicId, NicId], str]:
        return pinned_vias((f.src, f.dst, f.via) for f in self.flows)

    @property
    def pinned_qps(self) -> dict[tuple[NicId, NicId, int], str]:
        """(src, dst, UDP source port) -> spine, for the QPs placement named a
        port: those of connections placed across spines, which no NIC-pair
        entry can steer."""
        return {(f.src, f.dst, f.src_port): f.via for f in self.flows if f.src_port and f.via}


def pinned_vias(flows: Iterable[tuple[NicId, NicId, str]]) -> dict[tuple[NicId, NicId], str]:
    """Per NIC pair, the spine the switches steer it across: the pairs whose
    flows (src, dst, via) were all placed on one. A pair whose queue pairs
    were placed across spines is not pinned as a pair: its QPs are pinned one
    by one on the source ports placement named (`Job.pinned_qps`), or, past
    the ports a NIC has, hashed each QP apart (E-ECMP), and TE steers each QP
    it sees collide."""
    return {pair: next(iter(v)) for pair, v in _vias(flows).items() if len(v) == 1}


def with_qp_ports(flows: Iterable[JobFlow]) -> list[JobFlow]:
    """The flows, with a UDP source port named for each QP of a connection
    placed across spines: per sending NIC, the next free port of `QP_PORTS`
    in the flows' order (a NIC is one GPU's, so one job's). A NIC with more
    such QPs than ports leaves the rest at 0, to the hash."""
    flows = list(flows)
    split = {pair for pair, vias in _vias((f.src, f.dst, f.via) for f in flows).items() if len(vias) > 1}
    taken: dict[NicId, int] = {}
    out = []
    for f in flows:
        n = taken.get(f.src, 0)
        if (f.src, f.dst) in split and n < len(QP_PORTS):
            taken[f.src] = n + 1
            f = replace(f, src_port=QP_PORTS[n])
        out.append(f)
    return out


def _vias(flows: Iterable[tuple[NicId, NicId, str]]) -> dict[tuple[NicId, NicId], set[str]]:
    """Per NIC pair, the spines its flows (src, dst, via) were placed on."""
    vias: dict[tuple[NicId, NicId], set[str]] = {}
    for src, dst, via in flows:
        if via:
            vias.setdefault((src, dst), set()).add(via)
    return vias


def validate_request(fabric: Fabric, req: JobRequest) -> None:
    spec = fabric.spec
    rails = fabric.rails
    if not valid_name(req.job_id):
        raise JobError("job_id", f"{shown(req.job_id)} is not a valid job id", NAME_RULE)
    if req.servers and not req.gpu_count:
        raise JobError("gpu_count", "is 0", "1 or more, with or without explicit servers")
    if not 1 <= req.gpu_count <= fabric.gpu_count:
        raise JobError(
            "gpu_count", f"{req.gpu_count} is out of range", f"1 to {fabric.gpu_count} (GPUs in fabric {spec.name!r})"
        )
    if not 0 <= req.gpus_per_server <= rails:
        raise JobError("gpus_per_server", f"{req.gpus_per_server} is out of range", f"0 (auto) to {rails} (rails)")
    k = req.per_server(rails)
    if req.gpu_count % k:
        raise JobError(
            "gpu_count",
            f"{req.gpu_count} GPUs do not fill whole servers at {k} per server",
            f"a multiple of {k} (or set gpus_per_server to a divisor of {req.gpu_count} up to {rails})",
        )
    if not isinstance(req.pattern, Pattern):
        raise JobError("pattern", f"{req.pattern!r} is not a pattern", ", ".join(p.value for p in Pattern))
    if not math.isfinite(req.flow_gbps) or not 0 <= req.flow_gbps <= spec.rates.nic_gbps:
        raise JobError("flow_gbps", f"{req.flow_gbps} is out of range", f"0 to {spec.rates.nic_gbps:g} (the NIC rate)")
    pods = len({s.pod for s in fabric.servers})
    if not 0 <= req.max_pods <= pods:
        raise JobError("max_pods", f"{req.max_pods} is out of range", f"0 (no limit) to {pods}")
    if req.servers:
        known = {s.name for s in fabric.servers}
        for i, name in enumerate(req.servers):
            if name not in known:
                raise JobError(
                    f"servers[{i}]",
                    f"{name!r} is not a server of fabric {spec.name!r}",
                    "names listed by `railyard fabric show --addresses`",
                )
        if len(set(req.servers)) != len(req.servers):
            raise JobError("servers", "names a server twice", "distinct server names")
        if len(req.servers) != req.server_count(rails):
            raise JobError(
                "servers",
                f"{len(req.servers)} servers given for {req.gpu_count} GPUs at {k} per server",
                f"exactly {req.server_count(rails)} servers",
            )
    if len(req.request_id) > 128:
        raise JobError("request_id", f"{len(req.request_id)} characters", "at most 128")
    limit = req.max_predicted_utilization
    if not math.isfinite(limit) or not 0 <= limit <= 100:
        raise JobError(
            "max_predicted_utilization", f"{limit} is out of range", "0 (no limit) to 100 (a share of a link)"
        )
    if not 1 <= req.qps_per_connection <= MAX_QPS:
        raise JobError(
            "qps_per_connection", f"{req.qps_per_connection} is out of range", f"0 or 1 (one QP) to {MAX_QPS}"
        )


# --- durable form ---------------------------------------------------------------


def job_to_doc(job: Job) -> dict[str, Any]:
    r = job.request
    return {
        "request": {
            "gpu_count": r.gpu_count,
            "pattern": r.pattern.value,
            "flow_gbps": r.flow_gbps,
            "gpus_per_server": r.gpus_per_server,
            "servers": list(r.servers),
            "max_pods": r.max_pods,
            "exclusive": r.exclusive,
            "request_id": r.request_id,
            "max_predicted_utilization": r.max_predicted_utilization,
            "qps_per_connection": r.qps_per_connection,
        },
        "gpus": [[g.rank, ad.nic_ip(g.nic)] for g in job.gpus],
        # A QP's named source port as a fifth element, only where there is one.
        "flows": [[ad.nic_ip(f.src), ad.nic_ip(f.dst), f.demand_bps, f.via, *_port(f)] for f in job.flows],
        "predicted_max_utilization": job.predicted_max_utilization,
        "placed_at": job.placed_at,
        "cross_cluster_share": job.cross_cluster_share,
    }


def job_from_doc(job_id: str, doc: Mapping[str, Any]) -> Job:
    r = doc["request"]
    request = JobRequest(
        job_id,
        int(r["gpu_count"]),
        Pattern(r["pattern"]),
        float(r["flow_gbps"]),
        int(r["gpus_per_server"]),
        tuple(r["servers"]),
        int(r["max_pods"]),
        bool(r["exclusive"]),
        str(r["request_id"]),
        float(r.get("max_predicted_utilization", 0.0)),  # stores written before it existed have none
        int(r.get("qps_per_connection", 1)),
    )
    return Job(
        request,
        tuple(Gpu(int(rank), ad.parse_nic_address(addr)) for rank, addr in doc["gpus"]),
        tuple(
            JobFlow(ad.parse_nic_address(s), ad.parse_nic_address(d), float(bps), str(via), int(port))
            for s, d, bps, via, port in (_padded(f) for f in doc["flows"])
        ),
        float(doc["predicted_max_utilization"]),
        float(doc["placed_at"]),
        float(doc.get("cross_cluster_share", 0.0)),  # stores from before three tiers: one cluster
    )


def _port(flow: JobFlow) -> list[int]:
    return [flow.src_port] if flow.src_port else []


def _padded(flow: list[Any]) -> list[Any]:
    """A stored flow, with port 0 where it has none (every flow stored before ports were named)."""
    return flow if len(flow) == 5 else [*flow, 0]


@dataclass(frozen=True)
class Drains:
    """Operator drains: switches and links (a link named by either end, 'switch:port')."""

    switches: frozenset[str] = field(default_factory=frozenset)
    links: frozenset[str] = field(default_factory=frozenset)
