"""One simulation: a workload on a fabric, every arm, against the optimum. Pure.

A workload of unbounded flows (elephants, incasts, jobs without
iterations) is judged by goodput (goodput.py): ECMP and spraying static
per phase, TE per cycle of the closed loop, each as a fraction of the
splittable max-min optimum. For a job mix ECMP and spraying run on the
network-blind first-fit placement, and TE on Railyard's; each against the
optimum of its own flows.

A workload that iterates (jobs with iterations, flows with bytes or on/off
windows) is judged by time (iterations.py): every arm (arms.py) runs the
same duration on the fluid timeline, and each job's iteration times are
compared arm by arm and against the optimum.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from controller.fabric import Fabric
from controller.intent.model import Intent
from emulation.model.sharing import Sharing
from emulation.simulate.arms import OPTIMUM, PLACEMENT_OF, RAILYARD_TE, RULES, baselines
from emulation.simulate.bound import Bound, optimum_bound
from emulation.simulate.conditions import Condition, conditions, phases_of
from emulation.simulate.goodput import (
    STEADY_CYCLES,
    TARGET,
    cycle_rows,
    fractions,
    loop_summary,
    static_figures,
    te_summary,
    yardstick,
)
from emulation.simulate.iterations import arm_figures, burst_figures, lowest, optimum_figures, placement_bounds
from emulation.simulate.jobbound import Cuts
from emulation.simulate.loop import ClosedLoop, LoopResult, LoopSettings, Progress
from emulation.simulate.prepared import Prepared, prepare
from emulation.simulate.records import (
    ArmFigures,
    ClusterFigures,
    CycleFigures,
    OptimumFigures,
    PhaseFigures,
    PhaseOptimum,
    PlacementFigures,
    SimulationReport,
    TeFigures,
    TelemetryModel,
)
from emulation.simulate.routes import Network
from emulation.simulate.timeline import Timeline
from emulation.simulate.traffic import FIRST_FIT, RAILYARD, Arm, SimFlow, build_arms
from emulation.workload import Workload

__all__ = ["STEADY_CYCLES", "TARGET", "simulate"]

# Completions coalesced within 5 ms (timeline.py): an iteration time's error
# stays under ~0.5% of a 1-3 s iteration (measured: README, bench-training).
RESOLVE_S = 0.005

BoundFn = Callable[[Fabric, Sequence[SimFlow], Sequence[str]], Bound]


def simulate(
    fabric: Fabric,
    workload: Workload,
    seed: int,
    duration_s: float | None = None,
    progress: Progress | None = None,
    bound: BoundFn = optimum_bound,
    notify: Callable[[str], None] = lambda _: None,
    resolve_s: float = RESOLVE_S,
    sharing: Sharing = Sharing.PROPORTIONAL,
    framed: bool = True,
    underlay: str = "fabric",
) -> SimulationReport:
    """The full result, judged by goodput or by time. `framed`: flows pay
    for their frames' headers and ACKs on the wire (framing.py); without,
    they move delivered bytes alone, as the optimum counts them.
    `underlay`: who installs it in the TE arm (LoopSettings.underlay)."""
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[name] = timings.get(name, 0.0) + now - clock
        clock = now

    notify("placing and routing flows")
    workload, arms = build_arms(fabric, workload, seed)
    lap("flows_s")
    fabric_conditions = conditions(fabric, workload.events)
    network = Network(fabric)
    links_die = any(c.dead for c in fabric_conditions)
    preps = {name: prepare(network, arm, links_die, framed) for name, arm in arms.items()}
    railyard = preps[RAILYARD]
    lap("routes_s")
    telemetry = workload.telemetry
    duration_s = workload.duration_s if duration_s is None else duration_s
    settings = LoopSettings(
        telemetry.interval_s,
        telemetry.noise,
        telemetry.latency_s,
        duration_s,
        workload.engine,
        seed,
        resolve_s,
        sharing,
        tuple(workload.traffic_changes(duration_s)),
        underlay,
    )
    iterating = any(p.arm.iterating for p in preps.values())
    if iterating:
        notify("baselines")
        runs = baselines(preps, fabric_conditions, settings.simulated_s, resolve_s, sharing)
        lap("baselines_s")
        loop = _closed_loop(fabric, railyard, fabric_conditions, settings, notify, progress)
        lap("loop_s")
        runs[RAILYARD_TE] = loop.timeline
        notify("the optimum")
        judged = _judged_by_time(preps, runs, fabric_conditions, loop, settings)
        lap("optimum_s")
    else:
        baseline = preps.get(FIRST_FIT, railyard)
        notify("solving the optimum")
        static, te_bounds, te_phases = _goodput_optimum(fabric, baseline, railyard, fabric_conditions, settings, bound)
        lap("optimum_s")
        loop = _closed_loop(
            fabric, railyard, fabric_conditions, settings, notify, progress, yardstick(te_phases, te_bounds)
        )
        lap("loop_s")
        by_cycle = fractions(loop, te_phases, te_bounds)
        judged = _Judged(
            te=te_summary(loop, by_cycle, settings),
            cycles=cycle_rows(loop, by_cycle),
            phases=static,
            te_optimum=[PhaseOptimum(p.start_s, OptimumFigures.of(b)) for p, b in zip(te_phases, te_bounds)],
        )
    return _report(fabric, workload, seed, settings, railyard, judged, _placement(arms, loop, fabric), timings)


@dataclass(frozen=True)
class _Judged:
    """A run's judgement: by goodput (phases, te_optimum) or by time (arms)."""

    te: TeFigures
    cycles: list[CycleFigures]
    phases: list[PhaseFigures] | None = None
    te_optimum: list[PhaseOptimum] | None = None
    arms: dict[str, ArmFigures] | None = None


def _report(
    fabric: Fabric,
    workload: Workload,
    seed: int,
    settings: LoopSettings,
    railyard: Prepared,
    judged: _Judged,
    placement: dict[str, PlacementFigures],
    timings: dict[str, float],
) -> SimulationReport:
    """What was simulated and how, beside how it was judged."""
    return SimulationReport(
        workload=workload.name,
        description=workload.description,
        traffic=[type(item).__name__ for item in workload.traffic],
        fabric=fabric.spec.name,
        gpus=fabric.gpu_count,
        seed=seed,
        duration_s=settings.duration_s,
        flows=len(railyard.arm.flows),
        events=[{"at_s": e.at_s, e.kind: e.target} for e in workload.events],
        telemetry=TelemetryModel(settings.interval_s, settings.noise, settings.latency_s),
        sharing=settings.sharing,
        framed=railyard.wire is not None,
        underlay=settings.underlay,
        engine=settings.engine,
        resolve_s=settings.resolve_s,
        arms=judged.arms,
        phases=judged.phases,
        te_optimum=judged.te_optimum,
        te=judged.te,
        cycles=judged.cycles,
        placement=placement,
        setup_s=timings,
    )


def _closed_loop(
    fabric: Fabric,
    railyard: Prepared,
    fabric_conditions: Sequence[Condition],
    settings: LoopSettings,
    notify: Callable[[str], None],
    progress: Progress | None,
    yardstick_: Callable[[float], np.ndarray] | None = None,
) -> LoopResult:
    notify("closed loop")
    intent = Intent(jobs=dict(railyard.arm.intent_jobs))
    return ClosedLoop(fabric, railyard, fabric_conditions, settings, intent, yardstick_).run(progress)


def _goodput_optimum(
    fabric: Fabric,
    baseline: Prepared,
    railyard: Prepared,
    fabric_conditions: Sequence[Condition],
    settings: LoopSettings,
    bound: BoundFn,
) -> tuple[list[PhaseFigures], list[Bound], list]:
    """ECMP and spraying per phase of the baseline, and the optimum of every phase of both placements."""
    solved: dict[tuple[int, tuple[str, ...], bytes], Bound] = {}

    def bound_of(prep: Prepared, phase) -> Bound:
        key = (id(prep), phase.dead, phase.started.tobytes())
        if key not in solved:
            started = [f for f, on in zip(prep.arm.flows, phase.started) if on]
            solved[key] = bound(fabric, started, phase.dead)
        return solved[key]

    base_phases = phases_of(baseline.arm.flows, fabric_conditions, settings.duration_s)
    te_phases = phases_of(railyard.arm.flows, fabric_conditions, settings.duration_s)
    te_bounds = [bound_of(railyard, p) for p in te_phases]
    static = [static_figures(baseline, p, bound_of(baseline, p), settings.sharing) for p in base_phases]
    return static, te_bounds, te_phases


def _judged_by_time(
    preps: dict[str, Prepared],
    runs: dict[str, Timeline],
    fabric_conditions: Sequence[Condition],
    loop: LoopResult,
    settings: LoopSettings,
) -> _Judged:
    cuts = Cuts(preps[RAILYARD].network)
    own = {placement: placement_bounds(prep, cuts, fabric_conditions) for placement, prep in preps.items()}
    bounds = lowest(list(own.values()))
    arms = {}
    for name, timeline in runs.items():
        placement = PLACEMENT_OF[name]
        placed = preps[placement].arm.jobs
        jobs, overall = arm_figures(
            timeline.iterations, timeline.unfinished(), placed, bounds, own[placement], fabric_conditions, name
        )
        arms[name] = ArmFigures(
            rule=RULES.get(name, name),
            placement=placement,
            jobs=jobs,
            overall=overall,
            bursts=burst_figures(timeline.bursts + timeline.unfinished_bursts()),
        )
    every_job = {job.job_id: job for prep in preps.values() for job in prep.arm.jobs}  # placed by any arm
    arms[OPTIMUM] = optimum_figures(sorted(every_job.values(), key=lambda j: j.job_id), bounds, RULES[OPTIMUM])
    return _Judged(te=TeFigures(None, loop_summary(loop, settings)), cycles=cycle_rows(loop, None), arms=arms)


def _placement(arms: dict[str, Arm], loop: LoopResult, fabric: Fabric) -> dict[str, PlacementFigures]:
    if len(arms) == 1:
        return {}
    return {
        name: PlacementFigures(
            gpus_used=arm.gpus_used,
            fill=arm.gpus_used / fabric.gpu_count,
            refused_jobs=arm.refused,
            jobs=len(arm.jobs),
            flows=len(arm.flows),
            clusters=_clusters_of_jobs(arm, fabric) if fabric.spec.clusters > 1 else None,
            steered_flows=sum(1 for f in arm.flows if f.via) if name == RAILYARD else None,
            placement_flow_mods=loop.placement_flow_mods if name == RAILYARD else None,
        )
        for name, arm in arms.items()
    }


def _clusters_of_jobs(arm: Arm, fabric: Fabric) -> ClusterFigures:
    """How well a placement keeps jobs inside a cluster: of the jobs that fit
    one (at most a cluster's GPUs), the fraction whose collectives never
    cross the core; and, over every job, the share of collective flows
    (by bytes per iteration, else by count) that cross it."""
    cluster_of = fabric.spec.cluster_of
    per_cluster = fabric.gpu_count // fabric.spec.clusters
    fitting = inside = 0
    crossing = total = 0.0
    for job in arm.jobs:
        flows = [arm.flows[t] for t in job.transfers]
        across = [cluster_of(f.src.pod) != cluster_of(f.dst.pod) for f in flows]
        weights = [f.bytes or 1 for f in flows]
        crossing += sum(w for w, a in zip(weights, across) if a)
        total += sum(weights)
        if job.gpus <= per_cluster:
            fitting += 1
            inside += not any(across)
    return ClusterFigures(fitting, inside / fitting if fitting else None, crossing / total if total else 0.0)
