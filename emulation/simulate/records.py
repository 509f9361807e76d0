"""A simulation's result as typed records: what `run.py` builds, the
tables (report*.py) and the benchmarks read, and `output.py` writes. Each
field is named as its JSON key (emulation.model.jsonable), so `as_json` is
the JSON the simulator has always written. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.te.engine import EngineConfig
from emulation.model.jsonable import FLATTENED, FLATTENED_IF_ANY, OMITTED_IF_NONE, Json, as_json
from emulation.model.sharing import Sharing
from emulation.simulate.bound import Bound


@dataclass(frozen=True)
class Spread:
    """Of a list of values (an engine step's seconds): p50, p99, max and mean (0: none)."""

    p50: float
    p99: float
    max: float
    mean: float


@dataclass(frozen=True)
class OptimumFigures:
    """A phase's optimum: the splittable max-min aggregate, and the bounds weighed against it."""

    aggregate_bps: float
    single_path_bps: float | None
    throughput_bound_bps: float | None
    method: str
    solve_s: float

    @classmethod
    def of(cls, bound: Bound) -> OptimumFigures:
        return cls(bound.aggregate_bps, bound.single_path_bps, bound.throughput_bps, bound.method, bound.solve_s)


@dataclass(frozen=True)
class PhaseOptimum:
    """The optimum of one phase of TE's own placement, from `start_s`."""

    start_s: float
    optimum: OptimumFigures = field(metadata=FLATTENED)


@dataclass(frozen=True)
class RoutingFigures:
    """A static routing (ECMP, spraying) in one phase."""

    aggregate_bps: float
    fraction_of_optimum: float
    collided_uplinks: int


@dataclass(frozen=True)
class PhaseFigures:
    """One phase of the baseline placement: ECMP and spraying against its optimum."""

    start_s: float
    dead_links: list[str]
    flows: int
    optimum: OptimumFigures
    ecmp: RoutingFigures
    spray: RoutingFigures


@dataclass(frozen=True)
class CycleFigures:
    """One TE cycle of the closed loop; `fraction_of_optimum` in goodput runs only."""

    t: float
    fraction_of_optimum: float | None = field(metadata=OMITTED_IF_NONE)
    aggregate_bps: float
    collided_uplinks: int
    engine_collisions: int
    reroutes: int
    moves_active: int
    meters_active: int
    flow_mods: int
    meter_mods: int
    path_changes: int
    step_s: float
    fluid_s: float
    telemetry_s: float
    overlay_s: float
    decisions: dict[str, int]


@dataclass(frozen=True)
class TimeSplit:
    """Where the closed loop's wall time went, in seconds."""

    fluid_model: float
    telemetry: float
    engine: float
    overlay: float
    other: float


@dataclass(frozen=True)
class LoopFigures:
    """What the closed loop did and what it cost, whatever it is judged by."""

    reroutes_total: int
    reroutes_per_cycle_max: int
    steady_cycles: int
    reroutes_steady: int
    flow_mods_total: int
    flow_mods_steady: int
    meter_mods_total: int
    path_changes_per_flow_max: int
    path_changes_per_flow_per_change_max: int  # between two changes of traffic or links, as the emulation counts
    path_changes_per_moved_flow_mean: float
    flows_moved: int
    collided_uplinks_first: int
    collided_uplinks_final: int
    engine_step_s: Spread
    engine_step_cpu_s: Spread
    time_split_s: TimeSplit
    cycles: int
    simulated_s: float
    loop_wall_s: float
    sim_s_per_wall_s: float


@dataclass(frozen=True)
class TargetFigures:
    """In a goodput run, TE's fraction of the optimum over the cycles and how soon it met the target."""

    fraction_of_optimum_first: float
    fraction_of_optimum_final: float
    fraction_of_optimum_min_last_100: float
    target: float
    cycles_to_target: int | None
    cycles_to_target_and_holds: int | None
    time_to_target_s: float | None


@dataclass(frozen=True)
class TeFigures:
    """TE's figures: the loop's, and in a goodput run how it met the target (both in one JSON object)."""

    goal: TargetFigures | None = field(metadata=FLATTENED_IF_ANY)
    loop: LoopFigures = field(metadata=FLATTENED)


@dataclass(frozen=True)
class IterationFigures:
    """Iteration times of one job, or of all an arm's jobs (`overall`), against the optimum.
    A job's row carries its shape and bandwidths; an arm's job its own
    placement's optimum and its times; the optimum arm how it was found."""

    iterations: int
    p50_s: float
    p99_s: float
    max_s: float
    slowdown_p50: float
    slowdown_p99: float
    slowdown_max: float
    gpus: int | None = field(default=None, metadata=OMITTED_IF_NONE)
    collective: str | None = field(default=None, metadata=OMITTED_IF_NONE)
    message_bytes: int | None = field(default=None, metadata=OMITTED_IF_NONE)
    algbw_p50_gbps: float | None = field(default=None, metadata=OMITTED_IF_NONE)
    busbw_p50_gbps: float | None = field(default=None, metadata=OMITTED_IF_NONE)
    algbw_p99_gbps: float | None = field(default=None, metadata=OMITTED_IF_NONE)
    busbw_p99_gbps: float | None = field(default=None, metadata=OMITTED_IF_NONE)
    own_optimum_s: float | None = field(default=None, metadata=OMITTED_IF_NONE)
    unfinished_counted: int | None = field(default=None, metadata=OMITTED_IF_NONE)
    times_s: list[float] | None = field(default=None, metadata=OMITTED_IF_NONE)
    method: str | None = field(default=None, metadata=OMITTED_IF_NONE)


@dataclass(frozen=True)
class BurstFigures:
    """Completion times of the finite flows outside jobs."""

    completed: int
    cut_off: int
    p50_s: float
    p99_s: float
    max_s: float


@dataclass(frozen=True, kw_only=True)
class ArmFigures:
    """One arm of a run judged by time (or the optimum, as an arm: no placement, no bursts)."""

    rule: str
    placement: str | None = field(default=None, metadata=OMITTED_IF_NONE)
    jobs: dict[str, IterationFigures]
    overall: IterationFigures
    bursts: BurstFigures | None = field(default=None, metadata=OMITTED_IF_NONE)


@dataclass(frozen=True)
class ClusterFigures:
    """How well a placement keeps jobs inside a cluster (`run._clusters_of_jobs`)."""

    jobs_fitting_a_cluster: int
    jobs_fitting_a_cluster_kept_inside: float | None
    cross_cluster_flow_share: float


@dataclass(frozen=True)
class PlacementFigures:
    """One placement of a job mix; Railyard's with what its steering cost."""

    gpus_used: int
    fill: float
    refused_jobs: int
    jobs: int
    flows: int
    clusters: ClusterFigures | None = field(default=None, metadata=FLATTENED_IF_ANY)
    steered_flows: int | None = field(default=None, metadata=OMITTED_IF_NONE)
    placement_flow_mods: int | None = field(default=None, metadata=OMITTED_IF_NONE)


@dataclass(frozen=True)
class TelemetryModel:
    interval_s: float
    noise: float
    latency_s: float


@dataclass(frozen=True, kw_only=True)
class SimulationReport:
    """One simulation. A run of unbounded flows is judged by goodput
    (`phases`, `te_optimum`, cycles with their fraction); a run that
    iterates, by time (`arms`)."""

    workload: str
    description: str
    traffic: list[str]
    fabric: str
    gpus: int
    seed: int
    duration_s: float
    flows: int
    events: list[dict[str, Any]]  # {"at_s": ..., kind: target}, as the workload names them
    telemetry: TelemetryModel
    sharing: Sharing  # how flows share a link: every arm's rates but the optimum's (max-min by definition)
    framed: bool  # every arm's flows pay their frames' headers and ACKs on the wire; the optimum's do not
    underlay: str  # who installs it in TE's arm: "fabric", or "controller" (reserving placed jobs' uplinks)
    engine: EngineConfig  # as the run used it
    resolve_s: float
    arms: dict[str, ArmFigures] | None = field(default=None, metadata=OMITTED_IF_NONE)
    phases: list[PhaseFigures] | None = field(default=None, metadata=OMITTED_IF_NONE)
    te_optimum: list[PhaseOptimum] | None = field(default=None, metadata=OMITTED_IF_NONE)
    te: TeFigures
    cycles: list[CycleFigures]
    placement: Mapping[str, PlacementFigures]
    setup_s: dict[str, float]

    @property
    def goodput_phases(self) -> list[PhaseFigures]:
        """The phases of a goodput run (a run judged by time has none)."""
        return self.phases or []

    def as_json(self) -> Json:
        return as_json(self)
