"""A workload on a fabric, for a seed -> the plan both engines run: every
flow with its 5-tuple, its rate or bytes and its window, and each job's
iteration plan. Pure, apart from `place`, the caller's way of placing a job
(the real placement in-process, the PlacementService over gRPC, or a
baseline's packing): the same seed and placements give the same 5-tuples,
hence the same hash input, in the simulator and the emulation.

A collective's bytes per flow follow NCCL: a job of n GPUs on servers of k
GPUs runs one channel per rail, each carrying 1/k of the message S; per
flow between two servers,
- ring all-reduce: 2(n-1)/n x S/k;
- tree all-reduce (reduce up, broadcast down): S/k each way on a tree edge;
- all-to-all: every GPU sends S/n to every other, the k GPUs of a server
  through its NIC on the receiver's rail: k x S/n.
Bus bandwidth is NCCL-tests': busbw = algbw x 2(n-1)/n for an all-reduce,
x (n-1)/n for an all-to-all, where algbw = S / iteration time.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from controller.errors import FieldError
from controller.fabric import Fabric, NicId
from controller.fabric import addressing as ad
from controller.te.jobs import JobRequest, Pattern, pinned_vias
from controller.te.view import FlowKey
from emulation.model.pairs import incast_pairs, permutation_pairs
from emulation.workload.mix import background_requests, job_requests
from emulation.workload.model import (
    ExplicitFlow,
    FlowsItem,
    JobItem,
    JobMixItem,
    PatternItem,
    Rank,
    Window,
    Workload,
    WorkloadError,
)
from emulation.workload.ports import BYSTANDER, workload_ports


@dataclass(frozen=True)
class Placed:
    """Where a job went: its GPUs' NICs by rank, and its collective's flows
    (src, dst, the spine its placement put the flow on or "", the source port
    it named the flow or 0), a flow per connection, or per QP of one
    (`_queue_pairs` reads them back)."""

    gpus: tuple[NicId, ...]
    flows: tuple[tuple[NicId, NicId, str, int], ...]


Placer = Callable[[JobRequest], Placed | None]  # None: the job did not fit


_REQUEST_FIELDS = {"gpu_count": "gpus", "pattern": "collective", "flow_bandwidth_gbps": "flow_gbps"}


@dataclass(frozen=True)
class Transfer:
    src: NicId
    dst: NicId
    protocol: str
    src_port: int
    dst_port: int
    rate_bps: float  # inf: elastic (TCP); else what it sends at, at most
    bytes: int  # per burst (per iteration, for a job); 0: unbounded
    window: Window
    item: int  # index of its traffic item
    job: str = ""  # the job whose collective it belongs to
    via: str = ""  # the spine the job's placement steers it across; "": the underlay hashes it
    role: str = ""  # BYSTANDER: an incast's bystander elephant (else a sender, or not an incast's)

    @property
    def key(self) -> FlowKey:
        return (ad.nic_ip(self.src), ad.nic_ip(self.dst), self.protocol, self.src_port, self.dst_port)

    @property
    def unbounded(self) -> bool:
        """Always on through its window, no byte count: a steady elephant (judged by goodput)."""
        return not self.bytes and not self.window.on_s


@dataclass(frozen=True)
class JobPlan:
    job_id: str
    item: int
    collective: Pattern
    gpus: int
    per_server: int
    transfers: tuple[int, ...]  # indices into Plan.transfers
    message_bytes: int
    flow_bytes: int  # per transfer (one QP of a flow) per iteration
    iterations: int  # 0: unbounded flows, no iterations
    compute_gap_s: float
    start_s: float
    qps_per_connection: int = 1

    @property
    def busbw_factor(self) -> float:
        n = self.gpus
        return (n - 1) / n if self.collective is Pattern.ALL_TO_ALL else 2 * (n - 1) / n


@dataclass(frozen=True)
class Plan:
    transfers: tuple[Transfer, ...]
    jobs: tuple[JobPlan, ...] = ()
    refused: tuple[str, ...] = ()  # jobs that did not fit
    placed: dict[str, Placed] = field(default_factory=dict)

    @property
    def gpus_used(self) -> int:
        return sum(len(p.gpus) for p in self.placed.values())


def flow_bytes(collective: Pattern, message_bytes: int, gpus: int, per_server: int) -> int:
    """Bytes each inter-server flow of the collective carries per iteration (module doc)."""
    n, k = gpus, per_server
    if collective is Pattern.RING:
        share = 2 * (n - 1) / n * message_bytes / k
    elif collective is Pattern.TREE:
        share = message_bytes / k
    else:
        share = k * message_bytes / n
    return max(1, math.ceil(share))


@dataclass
class _Draft:
    """A transfer before its ports are drawn."""

    src: NicId
    dst: NicId
    protocol: str
    rate_bps: float
    bytes: int
    window: Window
    item: int
    job: str = ""
    via: str = ""
    role: str = ""
    src_port: int = 0  # named by the job's placement; 0: drawn with every other flow's


@dataclass
class _Expansion:
    """What `expand` builds up, item by item."""

    nic_bps: float
    drafts: list[_Draft] = field(default_factory=list)
    jobs: list[JobPlan] = field(default_factory=list)
    placed: dict[str, Placed] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)

    def rate(self, protocol: str, rate_gbps: float | None, where: str) -> float:
        """A flow's rate: what the file says (no more than a NIC sends), else
        a NIC's for UDP and elastic (inf) for TCP."""
        if rate_gbps is not None:
            if rate_gbps * 1e9 > self.nic_bps:
                raise WorkloadError(
                    f"{where}.rate_gbps",
                    f"{rate_gbps:g} Gb/s is more than a NIC sends",
                    f"at most {self.nic_bps / 1e9:g}",
                )
            return rate_gbps * 1e9
        return self.nic_bps if protocol == "udp" else math.inf

    def add(self, connection: _Draft, qps: int, placed: Sequence[tuple[str, int]] = ()) -> list[int]:
        """A connection as `qps` queue pairs, as NCCL opens them
        (NCCL_IB_QPS_PER_CONNECTION): each a transfer with its own source
        port, so the hash (E-ECMP) and TE place each apart; the bytes, and a
        stated rate, split evenly. `placed`: per QP, the spine and source
        port its job's placement gave it. -> their indices."""
        first = len(self.drafts)
        rate = connection.rate_bps / qps  # inf (elastic) stays inf
        size = -(-connection.bytes // qps)
        for j in range(qps):
            via, port = placed[j] if j < len(placed) else (connection.via, 0)
            self.drafts.append(replace(connection, rate_bps=rate, bytes=size, via=via, src_port=port))
        return list(range(first, first + qps))


def expand(fabric: Fabric, workload: Workload, seed: int, place: Placer) -> Plan:
    out = _Expansion(fabric.spec.rates.nic_gbps * 1e9)
    # Jobs first, in item order, so a flow item can name their ranks.
    for i, item in enumerate(workload.traffic):
        if isinstance(item, JobItem):
            requests = [
                JobRequest(
                    item.name,
                    item.gpus,
                    item.collective,
                    item.flow_gbps,
                    item.gpus_per_server,
                    item.servers,
                    qps_per_connection=item.qps_per_connection,
                )
            ]
        elif isinstance(item, JobMixItem):
            requests = background_requests(fabric, item, seed) + job_requests(fabric, item, seed, f"traffic[{i}]")
        else:
            continue
        for request in requests:
            job = _place(fabric, place, request, out.placed, isinstance(item, JobItem), f"traffic[{i}]")
            if job is None:
                out.refused.append(request.job_id)  # a mix draws until the fabric is full: the last may not fit
                continue
            out.placed[request.job_id] = job
            _add_job(fabric, out, item, i, request, job)

    for i, item in enumerate(workload.traffic):
        if isinstance(item, PatternItem):
            for draft in _pattern(fabric, item, i, seed, out.rate(item.protocol, item.rate_gbps, f"traffic[{i}]")):
                out.add(draft, 1 if draft.role == BYSTANDER else item.qps_per_connection)
        elif isinstance(item, FlowsItem):
            for j, flow in enumerate(item.flows):
                where = f"traffic[{i}].flows[{j}]"
                src, dst = _ends(fabric, flow, out.placed, where)
                rate = out.rate(flow.protocol, flow.rate_gbps, where)
                out.add(_Draft(src, dst, flow.protocol, rate, flow.bytes, flow.window, i), flow.qps_per_connection)

    return Plan(_with_ports(out.drafts, seed), tuple(out.jobs), tuple(out.refused), out.placed)


def _place(
    fabric: Fabric, place: Placer, request: JobRequest, placed: dict[str, Placed], named: bool, where: str
) -> Placed | None:
    """`place(request)`, its refusals named by the item's field (`named`: a
    job item's own; else a job mix's); None: a mix's job did not fit."""
    if request.job_id in placed:
        field = "job" if named else "jobs"
        raise WorkloadError(f"{where}.{field}", f"job {request.job_id!r} is placed twice", "one name per job")
    try:
        job = place(request)
    except FieldError as exc:  # the placement's own refusal (a server that does not exist, ...)
        field = _REQUEST_FIELDS.get(exc.field, exc.field) if named else "jobs"
        raise WorkloadError(f"{where}.{field}", f"{request.job_id}: {exc.problem}", exc.allowed) from None
    if job is None and named:  # a job the scenario names is part of what it means: not fitting is its error
        raise WorkloadError(
            f"{where}.gpus",
            f"job {request.job_id!r} does not fit fabric {fabric.spec.name!r}",
            "fewer GPUs",
        )
    return job


def _add_job(
    fabric: Fabric, out: _Expansion, item: JobItem | JobMixItem, i: int, request: JobRequest, job: Placed
) -> None:
    """A placed job's flows, as drafts, and its iteration plan."""
    k = request.per_server(fabric.rails)
    start = item.start_s if isinstance(item, JobItem) else 0.0
    stop = item.stop_s if isinstance(item, JobItem) else None
    size = flow_bytes(request.pattern, item.message_bytes, request.gpu_count, k) if item.iterations else 0
    rate = out.rate(item.protocol, None, f"traffic[{i}]")
    qps = item.qps_per_connection
    indices = []
    for (src, dst), (via, placed) in _queue_pairs(job).items():
        draft = _Draft(src, dst, item.protocol, rate, size, Window(start, stop), i, request.job_id, via)
        indices.extend(out.add(draft, qps, placed))
    out.jobs.append(
        JobPlan(
            request.job_id,
            i,
            request.pattern,
            request.gpu_count,
            k,
            tuple(indices),
            item.message_bytes,
            -(-size // qps),
            item.iterations,
            item.compute_gap_s,
            start,
            qps,
        )
    )


def _queue_pairs(job: Placed) -> dict[tuple[NicId, NicId], tuple[str, list[tuple[str, int]]]]:
    """Per connection of a placed job (a NIC pair, in the placement's
    order): the spine the switches pin it across (`pinned_vias`; "" where
    they hash it: within a leaf, or QPs placed apart), and the (spine,
    source port) placement named for its QPs, where it placed them apart (a
    QP left without one is hashed, `_Expansion.add`)."""
    pinned = pinned_vias((src, dst, via) for src, dst, via, _ in job.flows)
    named: dict[tuple[NicId, NicId], list[tuple[str, int]]] = {}
    for src, dst, via, port in job.flows:
        named.setdefault((src, dst), []).extend([(via, port)] if port else [])
    return {pair: (pinned.get(pair, ""), qps) for pair, qps in named.items()}


def _pattern(fabric: Fabric, item: PatternItem, i: int, seed: int, rate_bps: float) -> list[_Draft]:
    where = f"traffic[{i}]"
    rails = sorted({n.rail for n in fabric.nics})
    if item.rail is not None and item.rail not in rails:
        raise WorkloadError(f"{where}.rail", f"no rail {item.rail} on fabric {fabric.spec.name!r}", f"0 to {rails[-1]}")
    try:
        if item.kind == "permutation":
            pairs = [(s, d) for s, d in permutation_pairs(fabric) if item.rail in (None, s.rail)]
        elif item.kind == "all-to-all":
            pairs = _all_to_all_pairs(fabric, item.servers, item.rail, seed + i, where)
        else:
            # Each incast item its own draw (the first keeps the seed's own).
            pairs, bystander = incast_pairs(fabric, item.fan_in, seed + i, rail=item.rail)
            if item.bystander and bystander is None:
                raise WorkloadError(
                    f"{where}.bystander",
                    f"no NIC left for a bystander beside {fabric.spec.name!r}'s receiver with fan_in {item.fan_in}",
                    f"false, or a smaller fan_in than {item.fan_in}",
                )
            out = [_Draft(s, d, item.protocol, rate_bps, item.bytes, item.window, i) for s, d in pairs]
            if item.bystander and bystander is not None:
                out.append(_Draft(*bystander, "tcp", math.inf, 0, Window(), i, role=BYSTANDER))
            return out
    except WorkloadError:
        raise
    except FieldError as exc:  # the pair builders name `traffic.<field>`: named here as this item's
        raise WorkloadError(where + exc.field.removeprefix("traffic"), exc.problem, exc.allowed) from None
    return [_Draft(s, d, item.protocol, rate_bps, item.bytes, item.window, i) for s, d in pairs]


def _all_to_all_pairs(
    fabric: Fabric, servers: int, rail: int | None, seed: int, where: str
) -> list[tuple[NicId, NicId]]:
    """On every rail (or the one given), every ordered pair among `servers` servers drawn across the fabric."""
    keys = sorted({(n.pod, n.server) for n in fabric.nics})
    if servers > len(keys):
        raise WorkloadError(
            f"{where}.servers", f"{servers} servers", f"at most {len(keys)} on fabric {fabric.spec.name!r}"
        )
    chosen = sorted(random.Random(seed).sample(keys, servers))
    rails = sorted({n.rail for n in fabric.nics}) if rail is None else [rail]
    return [(NicId(r, *a), NicId(r, *b)) for r in rails for a in chosen for b in chosen if a != b]


def _ends(fabric: Fabric, flow: ExplicitFlow, placed: dict[str, Placed], where: str) -> tuple[NicId, NicId]:
    """A flow's NICs. A rank is its GPU's NIC; between two ranks on different
    rails the sender leaves through its server's NIC on the receiver's rail
    (rail-optimized: rails meet only inside a server)."""
    ends = []
    for end in ("src", "dst"):
        ref = getattr(flow, end)
        if isinstance(ref, Rank):
            job = placed.get(ref.job)
            if job is None:
                raise WorkloadError(
                    f"{where}.{end}", f"job {ref.job!r} did not fit the fabric", "a rank of a placed job"
                )
            ref = job.gpus[ref.rank]
        elif not fabric.has_nic(ref):
            raise WorkloadError(
                f"{where}.{end}", f"no NIC {ad.nic_ip(ref)} on fabric {fabric.spec.name!r}", "a NIC of this fabric"
            )
        ends.append(ref)
    src, dst = ends
    if (src.pod, src.server) == (dst.pod, dst.server):
        raise WorkloadError(
            f"{where}.dst", "is on the sender's own server (NVLink, not the fabric)", "a NIC on another server"
        )
    if src.rail != dst.rail:
        src = NicId(dst.rail, src.pod, src.server)
    return src, dst


def _with_ports(drafts: Sequence[_Draft], seed: int) -> tuple[Transfer, ...]:
    ports = workload_ports(drafts, seed)
    transfers = tuple(
        Transfer(d.src, d.dst, d.protocol, *ports[i], d.rate_bps, d.bytes, d.window, d.item, d.job, d.via, d.role)
        for i, d in enumerate(drafts)
    )
    listening = [(t.dst, t.protocol, t.dst_port) for t in transfers]
    if len(set(listening)) != len(listening):  # a receiver cannot listen twice on one port
        raise AssertionError("two flows of one workload share a receiver's port: a bug in flow_ports")
    return transfers
