"""One simulation: a workload on a fabric, judged three ways against the optimum. Pure.

- ECMP: every flow where the underlay's 5-tuple hash puts it (static);
- spraying: every flow split evenly over all its equal-cost paths (static);
- TE: the closed loop (`loop.ClosedLoop`) with the real engine, from ECMP
  (or, for a job mix, from Railyard's placement) onwards.

For a job mix ECMP and spraying run on the network-blind first-fit
placement, and TE on Railyard's; each is judged against the optimum of its
own flows. Static figures and the optimum are computed per phase (flows
starting, links failing), and the TE cycles are judged against the phase
they fall in.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from controller.fabric import Fabric
from controller.intent.model import Intent
from emulation.simulate.bound import Bound, optimum_bound
from emulation.simulate.figures import natural_demand, outcome
from emulation.simulate.loop import ClosedLoop, LoopResult, LoopSettings, Phase, Progress, phases_of
from emulation.simulate.routes import (
    AckRoutes,
    Network,
    Routes,
    ack_routes,
    ack_steering,
    build_routes,
    ecmp_routes,
    flow_hash,
)
from emulation.simulate.traffic import Arm, SimFlow, build_arms
from emulation.simulate.workload import Workload

TARGET = 0.97
STEADY_CYCLES = 100

BoundFn = Callable[[Fabric, Sequence[SimFlow], Sequence[str]], Bound]


@dataclass(frozen=True)
class Prepared:
    """An arm made ready for the fluid model."""

    arm: Arm
    routes: Routes
    hashes: np.ndarray
    phases: list[Phase]
    acks: AckRoutes | None  # None: no link dies, no ACK stream is cut


def prepare(network: Network, arm: Arm, workload: Workload) -> Prepared:
    pairs = [(f.src, f.dst) for f in arm.flows]
    keys = [f.key for f in arm.flows]
    routes = build_routes(network, pairs)
    events = [(e.at_s, e.link) for e in workload.events]
    acks = ack_routes(network, keys, pairs) if events else None
    return Prepared(arm, routes, flow_hash(keys), phases_of(arm.flows, events), acks)


def static_figures(prep: Prepared, phase: Phase, bound: Bound) -> dict:
    """ECMP and spraying at one phase, against its optimum."""
    routes, network = prep.routes, prep.routes.network
    capacity = network.capacity_without(phase.dead)
    demand = np.fromiter((f.demand_bps for f in prep.arm.flows), dtype=float, count=len(prep.arm.flows))
    demand = np.where(phase.started, demand, 0.0)
    if prep.acks is not None:  # ECMP: ACKs hashed too, but where a placed job's pair entry steers them
        flows = prep.arm.flows
        steer = ack_steering([f.via for f in flows], [(f.src, f.dst) for f in flows], {}, prep.acks)
        ecmp_demand = np.where(prep.acks.stalled(capacity, steer), 0.0, demand)
    else:
        ecmp_demand = demand
    natural = natural_demand(routes, prep.arm.flows, phase.started)
    hashed = ecmp_routes(routes, prep.hashes, routes.ingress_usable(capacity))
    ecmp = outcome(routes.shares(hashed), capacity, ecmp_demand, natural, network.is_uplink)
    spray = outcome(routes.spray_shares(routes.route_usable(capacity)), capacity, demand, natural, network.is_uplink)

    def judged(aggregate: float) -> float:
        return aggregate / bound.aggregate_bps if bound.aggregate_bps else 0.0

    return {
        "start_s": phase.start_s,
        "dead_links": list(phase.dead),
        "flows": int(phase.started.sum()),
        "optimum": _bound_row(bound),
        "ecmp": {
            "aggregate_bps": ecmp.aggregate_bps,
            "fraction_of_optimum": judged(ecmp.aggregate_bps),
            "collided_uplinks": ecmp.collided_uplinks,
        },
        "spray": {
            "aggregate_bps": spray.aggregate_bps,
            "fraction_of_optimum": judged(spray.aggregate_bps),
            "collided_uplinks": spray.collided_uplinks,
        },
    }


def _bound_row(bound: Bound) -> dict:
    return {
        "aggregate_bps": bound.aggregate_bps,
        "single_path_bps": bound.single_path_bps,
        "throughput_bound_bps": bound.throughput_bps,
        "method": bound.method,
        "solve_s": bound.solve_s,
    }


def simulate(
    fabric: Fabric,
    workload: Workload,
    seed: int,
    duration_s: float | None = None,
    progress: Progress | None = None,
    bound: BoundFn = optimum_bound,
    notify: Callable[[str], None] = lambda _: None,
) -> dict:
    """The full result as a JSON-ready dict (see `summary` for the headline figures)."""
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[name] = timings.get(name, 0.0) + now - clock
        clock = now

    notify("placing and routing flows")
    baseline_arm, railyard_arm = build_arms(fabric, workload, seed)
    lap("flows_s")
    network = Network(fabric)
    baseline = prepare(network, baseline_arm, workload)
    railyard = baseline if railyard_arm is baseline_arm else prepare(network, railyard_arm, workload)
    lap("routes_s")

    notify("solving the optimum")
    bounds: dict[tuple[int, int], Bound] = {}
    for prep in (baseline, railyard):
        for i, phase in enumerate(prep.phases):
            if (id(prep), i) not in bounds:
                started = [f for f, on in zip(prep.arm.flows, phase.started) if on]
                bounds[(id(prep), i)] = bound(fabric, started, phase.dead)
    lap("optimum_s")
    notify("ECMP and spraying")
    static = [static_figures(baseline, phase, bounds[(id(baseline), i)]) for i, phase in enumerate(baseline.phases)]
    lap("baselines_s")

    telemetry = workload.telemetry
    settings = LoopSettings(
        telemetry.interval_s,
        telemetry.noise,
        telemetry.latency_s,
        workload.duration_s if duration_s is None else duration_s,
        workload.engine,
        seed,
    )
    loop = ClosedLoop(
        fabric,
        railyard.routes,
        railyard.arm.flows,
        railyard.hashes,
        railyard.phases,
        settings,
        Intent(jobs=dict(railyard.arm.jobs)),
        railyard.acks,
    )
    notify("closed loop")
    result = loop.run(progress)
    lap("loop_s")
    te_bounds = [bounds[(id(railyard), i)] for i in range(len(railyard.phases))]
    return {
        "workload": workload.name,
        "description": workload.description,
        "pattern": workload.pattern,
        "fabric": fabric.spec.name,
        "gpus": fabric.gpu_count,
        "seed": seed,
        "duration_s": settings.duration_s,
        "flows": len(railyard.arm.flows),
        "telemetry": {"interval_s": settings.interval_s, "noise": settings.noise, "latency_s": settings.latency_s},
        "engine": asdict(settings.engine),
        "placement": _placement(workload, baseline.arm, railyard.arm, result, fabric.gpu_count),
        "phases": static,
        "te_optimum": [{"start_s": p.start_s, **_bound_row(b)} for p, b in zip(railyard.phases, te_bounds)],
        "te": te_summary(result, te_bounds, settings),
        "cycles": cycle_rows(result, te_bounds),
        "setup_s": timings,
    }


def _placement(workload: Workload, baseline: Arm, railyard: Arm, result: LoopResult, gpus: int) -> dict:
    if workload.pattern != "jobs":
        return {}
    return {
        "baseline": {
            "rule": "first-fit, network-blind; flows hashed",
            "gpus_used": baseline.gpus_used,
            "fill": baseline.gpus_used / gpus,
            "refused_jobs": baseline.refused,
            "flows": len(baseline.flows),
        },
        "railyard": {
            "rule": "controller.te.placement.place, as the intent service calls it",
            "gpus_used": railyard.gpus_used,
            "fill": railyard.gpus_used / gpus,
            "refused_jobs": railyard.refused,
            "jobs": len(railyard.jobs),
            "flows": len(railyard.flows),
            "steered_flows": sum(1 for f in railyard.flows if f.via),
            "placement_flow_mods": result.placement_flow_mods,
        },
    }


def fractions(result: LoopResult, bounds: Sequence[Bound]) -> list[float]:
    return [
        c.aggregate_bps / bounds[c.phase].aggregate_bps if bounds[c.phase].aggregate_bps else 0.0 for c in result.cycles
    ]


def cycle_rows(result: LoopResult, bounds: Sequence[Bound]) -> list[dict]:
    return [
        {
            "t": round(c.t, 6),
            "fraction_of_optimum": f,
            "aggregate_bps": c.aggregate_bps,
            "collided_uplinks": c.collided_uplinks,
            "engine_collisions": c.engine_collisions,
            "reroutes": c.reroutes,
            "moves_active": c.moves_active,
            "meters_active": c.meters_active,
            "flow_mods": c.flow_mods,
            "meter_mods": c.meter_mods,
            "path_changes": c.path_changes,
            "step_s": c.step_s,
            "fluid_s": c.fluid_s,
            "telemetry_s": c.telemetry_s,
            "overlay_s": c.overlay_s,
            "decisions": dict(c.decisions),
        }
        for c, f in zip(result.cycles, fractions(result, bounds))
    ]


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def te_summary(result: LoopResult, bounds: Sequence[Bound], settings: LoopSettings) -> dict:
    cycles = result.cycles
    frac = fractions(result, bounds)
    # The first cycle from which TE stays at or above the target to the end,
    # counted in engine steps that had run before it was measured.
    holds_from = None
    for i in range(len(frac) - 1, -1, -1):
        if frac[i] < TARGET:
            break
        holds_from = i
    first = next((i for i, f in enumerate(frac) if f >= TARGET), None)
    steady = cycles[-STEADY_CYCLES:]
    steps = [c.step_s for c in cycles]
    sim_s = len(cycles) * settings.interval_s
    loop_wall = result.wall_s  # everything in the loop, bookkeeping and progress included
    moved = result.path_changes_per_flow
    return {
        "fraction_of_optimum_first": frac[0] if frac else 0.0,
        "fraction_of_optimum_final": frac[-1] if frac else 0.0,
        "fraction_of_optimum_min_last_100": min(frac[-STEADY_CYCLES:], default=0.0),
        "target": TARGET,
        "cycles_to_target": first,
        "cycles_to_target_and_holds": holds_from,
        "time_to_target_s": None if first is None else cycles[first].t,
        "reroutes_total": sum(c.reroutes for c in cycles),
        "reroutes_per_cycle_max": max((c.reroutes for c in cycles), default=0),
        "steady_cycles": len(steady),
        "reroutes_steady": sum(c.reroutes for c in steady),
        "flow_mods_total": sum(c.flow_mods for c in cycles),
        "flow_mods_steady": sum(c.flow_mods for c in steady),
        "meter_mods_total": sum(c.meter_mods for c in cycles),
        "path_changes_per_flow_max": int(moved.max()) if moved.size else 0,
        "path_changes_per_moved_flow_mean": float(moved[moved > 0].mean()) if (moved > 0).any() else 0.0,
        "flows_moved": int((moved > 0).sum()),
        "collided_uplinks_first": cycles[0].collided_uplinks if cycles else 0,
        "collided_uplinks_final": cycles[-1].collided_uplinks if cycles else 0,
        "engine_step_s": {
            "p50": _percentile(steps, 0.5),
            "p99": _percentile(steps, 0.99),
            "max": max(steps, default=0.0),
            "mean": statistics.fmean(steps) if steps else 0.0,
        },
        "time_split_s": {
            "fluid_model": sum(c.fluid_s for c in cycles),
            "telemetry": sum(c.telemetry_s for c in cycles),
            "engine": sum(steps),
            "overlay": sum(c.overlay_s for c in cycles),
            "other": max(result.wall_s - sum(c.fluid_s + c.telemetry_s + c.step_s + c.overlay_s for c in cycles), 0.0),
        },
        "cycles": len(cycles),
        "simulated_s": sim_s,
        "loop_wall_s": loop_wall,
        "sim_s_per_wall_s": sim_s / loop_wall if loop_wall else math.inf,
    }
