"""A scenario report as typed records: what `report.py` builds, `table.py`
prints and `output.py` writes. Each field is named as its JSON key, so the
JSON a report is written as (`as_json`) is the records' own shape: a mode's
totals and TE figures sit beside its other figures, as they always have."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from emulation.model.jsonable import FLATTENED, OMITTED_IF_NONE, Json, as_json
from emulation.scenarios.control import EcmpControl
from emulation.scenarios.machine import HostCpu


@dataclass(frozen=True)
class Spread:
    """Of a list of values: how many, their mean, min, p50, p99 and max (None: no value)."""

    n: int
    mean: float | None = None
    min: float | None = None
    p50: float | None = None
    p99: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class Totals:
    """Goodput against the optimum, over flows: credited (each flow up to its
    own optimum rate) and as an aggregate, and against the single-path
    optimum. The fractions are None where no flow was judged (a run of
    iterating jobs and bursts only): no optimum, no fraction of it."""

    aggregate_mbps: float
    optimum_mbps: float
    fraction_of_optimum: float | None
    aggregate_over_optimum: float | None
    single_path_mbps: float | None
    fraction_of_single_path: float | None

    def judged_fraction(self) -> float:
        """`fraction_of_optimum`, for a reader whose scenario has goodput to judge."""
        if self.fraction_of_optimum is None:
            raise ValueError("no flow's goodput was judged in this run: there is no fraction of an optimum")
        return self.fraction_of_optimum


@dataclass(frozen=True)
class FlowFigures:
    flow: str
    goodput_mbps: float
    optimum_mbps: float
    single_path_optimum_mbps: float | None
    min_interval_mbps: float
    longest_zero_s: int
    error: str | None


@dataclass(frozen=True)
class PhaseFigures:
    """One stretch between failures or repairs, judged by the flows measured inside it."""

    from_s: float
    to_s: float
    dead_links: list[str]
    totals: Totals = field(metadata=FLATTENED)
    flows_measured: int  # flows with a judged second inside the phase
    bound_over_optimum: float  # the throughput bound over the optimum's aggregate (>= 1)

    @property
    def where(self) -> str:
        return f"{self.from_s:g}-{self.to_s:g} s"


@dataclass(frozen=True)
class SpineTier:
    mean_of_peaks: float
    peak: float


@dataclass(frozen=True)
class Queue:
    port: str
    p50_bytes: float
    p99_bytes: float
    steady_from_s: float
    peak_bytes_any_port_any_time: int


@dataclass(frozen=True)
class Incast:
    item: int
    converging_ports: list[str]
    converging_queue_p50_bytes: float
    converging_queue_p99_bytes: float
    converging_drops: int
    senders_jain: float | None  # None: no sender carried anything
    senders_min_share: float
    bystander_share: float | None


@dataclass(frozen=True)
class OptimumStretch:
    from_s: float
    to_s: float
    seconds: float | None  # None: a flow of the job had no live path


@dataclass(frozen=True)
class Dispatch:
    max_s: float
    max_share_of_iteration: float


@dataclass(frozen=True)
class JobFigures:
    job: str
    collective: str
    gpus: int
    flows: int
    message_bytes: int
    flow_bytes: int
    iterations_planned: int
    iterations_started: int
    iterations_finished: int
    iteration_s: Spread
    optimum_iteration_s: list[OptimumStretch]
    slowdown_vs_optimum: Spread
    algbw_gbytes_s: Spread
    busbw_gbytes_s: Spread
    dispatch_overhead: Dispatch
    times_s: list[tuple[float, float | None]]  # per iteration started: (start, time; None: unfinished)
    slowdowns: list[float]  # per finished iteration with a bound, in order
    # Where the underlay's vias are known (the ECMP run's): the links ECMP overloads for the job.
    ecmp_collided_links: list[str] | None = field(default=None, metadata=OMITTED_IF_NONE)

    @property
    def optimum_s(self) -> float | None:
        """The fastest stretch's optimum iteration time."""
        return min((o.seconds for o in self.optimum_iteration_s if o.seconds), default=None)


@dataclass(frozen=True)
class BurstFigures:
    item: int
    bursts: int
    unfinished: int
    completion_s: Spread
    delivered_share: Spread


@dataclass(frozen=True)
class OnOffFigures:
    item: int
    flows: int
    goodput_while_on_mbps: Spread


@dataclass(frozen=True)
class Episode:
    """A collision TE saw on `uplink`: from the first sample showing it to the commit of the move relieving it."""

    uplink: str
    onset_s: float
    detected_s: float
    fixed_s: float | None  # None: no move relieved it

    @property
    def to_fix_s(self) -> float | None:
        return None if self.fixed_s is None else self.fixed_s - self.onset_s


@dataclass(frozen=True)
class CollisionToFix:
    median: float | None
    p99: float | None
    all: list[float]
    unfixed: int
    commit_latency_s: float | None
    episodes: list[Episode]


@dataclass(frozen=True)
class PerFlow:
    mean: float
    max: int


@dataclass(frozen=True)
class TeFigures:
    """What TE did, read from its decision records."""

    last_move_s: float | None
    moves_in_steady_traffic: int
    collision_to_fix_s: CollisionToFix
    unfixable_collisions: int
    moves_per_flow: PerFlow
    path_changes_per_flow: PerFlow
    path_changes_per_flow_per_change_max: int  # between two changes of traffic or links
    returned_to_ecmp: int


@dataclass(frozen=True)
class ModeFigures:
    """One run (ECMP or TE) judged against the optimum."""

    flows: list[FlowFigures]
    totals: Totals = field(metadata=FLATTENED)
    phases: list[PhaseFigures]
    jain_fairness: float | None  # over the judged flows' shares of their optimum; None: none judged
    max_spine_tier_utilization: SpineTier
    bottleneck_queue: Queue
    drops: int
    policed: int
    incast: Incast | None = field(metadata=OMITTED_IF_NONE)
    jobs: list[JobFigures]
    bursts: list[BurstFigures]
    on_off: list[OnOffFigures]
    emulation_scale: float
    transfer_errors: list[str]
    skipped_events: list[str]
    te_decisions: dict[str, float]  # decisions by kind, from the controller's counter
    te: TeFigures = field(metadata=FLATTENED)
    flow_mods: float
    reconcile_failures: float
    host_cpu: HostCpu | None = field(default=None, metadata=OMITTED_IF_NONE)  # while the traffic ran
    # "passed", "failed: ..." or "skipped: ..." (a flow reported an error); absent: not checked
    # (an earlier mode failed first, or the controller failed a reconcile pass).
    optimum_check: str | None = field(default=None, metadata=OMITTED_IF_NONE)

    @property
    def failed_flows(self) -> int:
        """Flows that reported an error (iperf3's, per flow)."""
        return sum(1 for f in self.flows if f.error)


@dataclass(frozen=True)
class OptimumPhase:
    from_s: float
    to_s: float
    dead_links: list[str]
    aggregate_mbps: float
    method: str
    single_path_mbps: float | None
    single_path_method: str | None
    throughput_bound_mbps: float
    solve_s: float
    rates_mbps: list[float]
    routes: list[list[list[Any]]]  # per flow: [via, Mb/s] pairs
    single_path_vias: list[str] | None


@dataclass(frozen=True)
class Optimum:
    kind: str
    about: str
    tolerance: float
    aggregate_mbps: float  # time-weighted over the phases
    phases: list[OptimumPhase]


@dataclass(frozen=True)
class ScenarioReport:
    scenario: str
    description: str
    fabric: str
    seed: int
    telemetry: str  # where the TE run's telemetry came from
    underlay: str  # who installed the underlay
    duration_s: float
    events: list[dict[str, Any]]  # {"at_s": ..., kind: target}, as the workload names them
    optimum: Optimum
    modes: Mapping[str, ModeFigures]
    # The ECMP run against the simulator's for the same hash (control.py): None where not run.
    ecmp_against_simulator: EcmpControl | None = field(default=None, metadata=OMITTED_IF_NONE)

    @property
    def failed_flows(self) -> int:
        return sum(m.failed_flows for m in self.modes.values())

    def as_json(self) -> Json:
        return as_json(self)
