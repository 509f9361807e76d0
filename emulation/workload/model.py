"""What a workload file says, as frozen data. Rates and sizes are in the
fabric's own units (its `rates.nic_gbps`); the emulation scales both by
`emulated_nic_mbps / nic_gbps`, so every time in the file (starts, stops,
gaps, iteration times) means the same in both engines."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from controller.errors import FieldError
from controller.fabric import NicId
from controller.te.engine import EngineConfig
from controller.te.jobs import Pattern

PATTERN_KINDS = ("permutation", "incast", "all-to-all")
PROTOCOLS = ("tcp", "udp")
EVENT_KINDS = ("link_down", "link_up", "switch_down", "switch_up", "drain", "undrain")


class WorkloadError(FieldError):
    context = "scenario"


@dataclass(frozen=True)
class Window:
    """When a flow sends: from `start_s` to `stop_s` (None: the end of the
    run); with `on_s`, on for `on_s` then off for `off_s`, repeated; with
    `every_s` (finite flows only), its bytes again at every period."""

    start_s: float = 0.0
    stop_s: float | None = None
    on_s: float = 0.0
    off_s: float = 0.0
    every_s: float = 0.0

    def stop(self, duration_s: float) -> float:
        return duration_s if self.stop_s is None else min(self.stop_s, duration_s)

    def bursts(self, duration_s: float) -> list[tuple[float, float]]:
        """(start, stop) of every stretch the flow sends in. A finite flow's
        stretch is where it may send: it ends once its bytes are through."""
        stop = self.stop(duration_s)
        period = self.period
        if not period:
            return [(self.start_s, stop)]
        length = self.on_s or period
        # k x period, not a running sum: added up, the float steps drift past a last boundary.
        count = math.ceil((stop - self.start_s) / period - 1e-9)
        return [(t, min(t + length, stop)) for t in (self.start_s + k * period for k in range(count))]

    @property
    def period(self) -> float:
        """Seconds from one burst's start to the next (0: one stretch)."""
        return self.every_s or (self.on_s + self.off_s if self.on_s else 0.0)


@dataclass(frozen=True)
class Rank:
    """A GPU of a job in the workload, by its rank (its place in the job's GPU list)."""

    job: str
    rank: int


@dataclass(frozen=True)
class ExplicitFlow:
    src: NicId | Rank
    dst: NicId | Rank
    protocol: str = "tcp"
    rate_gbps: float | None = None  # udp: its rate (None: line rate); tcp: a cap (None: elastic)
    bytes: int = 0  # 0: sends until its window ends
    window: Window = field(default_factory=Window)
    qps_per_connection: int = 1  # up to MAX_QPS: the bytes and a stated rate split evenly over them


@dataclass(frozen=True)
class FlowsItem:
    flows: tuple[ExplicitFlow, ...]


@dataclass(frozen=True)
class PatternItem:
    kind: str  # PATTERN_KINDS
    protocol: str = "tcp"
    rate_gbps: float | None = None
    bytes: int = 0
    window: Window = field(default_factory=Window)
    fan_in: int = 8  # incast: senders into one NIC
    bystander: bool = False  # incast: a TCP elephant into the NIC beside the receiver, from the run's start
    servers: int = 8  # all-to-all: among this many servers (across pods), on every rail
    rail: int | None = None  # only this rail (incast: else drawn from the seed)
    qps_per_connection: int = 1


@dataclass(frozen=True)
class JobItem:
    """A job placed through the PlacementService, its collective run as
    bulk-synchronous iterations: every flow of the collective moves its share
    of `message_bytes`; the iteration ends when the last one is through; the
    next starts `compute_gap_s` later. `iterations` 0: the flows run
    unbounded from `start_s` to `stop_s` (judged by goodput, not iterations)."""

    name: str
    gpus: int
    collective: Pattern = Pattern.RING
    protocol: str = "tcp"
    flow_gbps: float = 100.0  # the per-flow demand the scheduler states (placement predicts with it)
    message_bytes: int = 0
    iterations: int = 0
    compute_gap_s: float = 0.0
    qps_per_connection: int = 1  # each flow of the collective over this many QPs (MAX_QPS)
    start_s: float = 0.0
    stop_s: float | None = None  # unbounded jobs only
    gpus_per_server: int = 0  # 0: as many as the servers have rails, up to gpus
    servers: tuple[str, ...] = ()  # the scheduler's choice of servers; empty: Railyard chooses


@dataclass(frozen=True)
class JobMixItem:
    """Jobs drawn from the mix (seeded) until `fill` of the GPUs are asked
    for, each then as a JobItem with these collective settings. A cluster in
    use is never empty: `background` of the servers, drawn from the seed
    across the fabric, are held first by one-server jobs from outside the
    scenario (other tenants, the residue of churn), which every placement
    must work around."""

    fill: float = 0.9
    sizes: tuple[tuple[int, float], ...] = ((8, 1.0), (16, 1.0), (64, 1.0), (256, 1.0))
    collectives: tuple[tuple[Pattern, float], ...] = (
        (Pattern.RING, 2.0),
        (Pattern.TREE, 1.0),
        (Pattern.ALL_TO_ALL, 1.0),
    )
    all_to_all_max_gpus: int = 64
    flow_gbps: float = 100.0
    protocol: str = "tcp"
    message_bytes: int = 0
    iterations: int = 0
    compute_gap_s: float = 0.0
    qps_per_connection: int = 1
    background: float = 0.0


Item = FlowsItem | PatternItem | JobItem | JobMixItem


@dataclass(frozen=True)
class Event:
    """At `at_s`: `kind` (EVENT_KINDS) on `target`, a link ("switch:port" of
    its lower end, or "leaf->spine") or a switch name. Drains act through the
    controller's API; an arm without a controller has none to drain."""

    at_s: float
    kind: str
    target: str
    index: int = 0  # its place in the file's list, for error messages (the events are kept in time order)

    @property
    def field(self) -> str:
        return f"events[{self.index}].{self.kind}"

    @property
    def on_link(self) -> bool:
        return self.kind.startswith("link_") or ":" in self.target or "->" in self.target


@dataclass(frozen=True)
class Telemetry:
    """The simulator's model of the telemetry agent (the emulation runs the real one)."""

    interval_s: float = 0.2
    noise: float = 0.3
    latency_s: float = 0.05


@dataclass(frozen=True)
class Workload:
    name: str
    description: str = ""
    duration_s: float = 10.0
    traffic: tuple[Item, ...] = ()
    events: tuple[Event, ...] = ()
    fabric: str | None = None  # the spec it runs on unless one is given: a shipped spec's file name, or a path
    telemetry: Telemetry = field(default_factory=Telemetry)
    engine: EngineConfig = field(default_factory=EngineConfig)

    def jobs(self) -> tuple[JobItem, ...]:
        return tuple(item for item in self.traffic if isinstance(item, JobItem))

    def traffic_changes(self, duration_s: float) -> list[float]:
        """When the traffic or the links change, in order: a flow starting or
        stopping (an on/off source at every burst), a job starting or
        stopping (its iterations are the same traffic again), a link or
        switch event, and the run's start and end."""
        windows: list[Window] = []
        out = {0.0, duration_s} | {e.at_s for e in self.events}
        for item in self.traffic:
            if isinstance(item, PatternItem):
                windows.append(item.window)
            elif isinstance(item, FlowsItem):
                windows.extend(f.window for f in item.flows)
            elif isinstance(item, JobItem):
                out |= {item.start_s, Window(item.start_s, item.stop_s).stop(duration_s)}
        return sorted(out | {t for w in windows for burst in w.bursts(duration_s) for t in burst})
