"""The closed loop: fluid model -> telemetry -> the real TE engine -> the real
overlay -> paths -> rates, one TE cycle per telemetry sample. Pure: the
clock is simulated, and the only outputs are the per-cycle records.

Per cycle, at t = k x interval:

1. the fabric as it is at t: link events so far, flows started so far, and
   the moves and meters whose entries have landed (decided at least
   `latency_s` earlier); rates re-solved when any of that changed;
2. telemetry as the agent reports it: a flow record per flow (rate, bytes,
   the ingress leaf's egress it takes) and a port sample per loaded switch
   egress, each times a uniform noise factor; port rates smoothed like the
   controller's LinkView does (the same EWMA);
3. `controller.te.engine.step`, exactly as the TE runner calls it (with the
   placed jobs' steered pairs);
4. if its moves or meters changed (the TE runner's own test), the overlay is
   rendered by the real overlay code and diffed per switch by the
   reconciler's `diff_table` (flowmods.py): the flow-mods that pass would
   send. The moves take effect `latency_s` later.

Idle switch ports are left out of the port samples: the engine reads a
missing port as an idle one (and a down port is always reported).
"""

from __future__ import annotations

import bisect
import gc
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from controller.fabric import Endpoint, Fabric
from controller.intent.model import Intent
from controller.te.engine import DecisionKind, EngineConfig, TeState, step
from controller.te.jobs import Drains
from controller.te.view import EWMA_ALPHA, FlowKey, FlowSample, PortSample
from emulation.model.fluid import link_loads, max_min_rates
from emulation.simulate.figures import collided_uplinks, natural_demand
from emulation.simulate.flowmods import FlowModCounter
from emulation.simulate.routes import AckRoutes, Routes, ack_steering, ecmp_routes
from emulation.simulate.traffic import SimFlow

GC_EVERY_CYCLES = 50


@dataclass(frozen=True)
class Phase:
    """A stretch of the run with the same flows started and the same links dead."""

    start_s: float
    dead: tuple[str, ...]
    started: np.ndarray  # per flow


@dataclass(frozen=True)
class LoopSettings:
    interval_s: float = 0.2
    noise: float = 0.3
    latency_s: float = 0.05
    duration_s: float = 10.0
    engine: EngineConfig = field(default_factory=EngineConfig)
    seed: int = 0


@dataclass(frozen=True)
class Cycle:
    t: float
    phase: int
    aggregate_bps: float  # of the rates in effect at t, before this cycle's step
    collided_uplinks: int  # by the flows' natural demands (figures.collided_uplinks)
    engine_collisions: int  # uplinks the engine itself calls collided after its step
    reroutes: int  # REROUTE decisions of this step
    moves_active: int
    meters_active: int
    flow_mods: int  # entries this cycle's reconcile pass would add, change or delete
    meter_mods: int
    path_changes: int  # flows whose path changed at t (moves landing, failover)
    step_s: float
    fluid_s: float
    telemetry_s: float
    overlay_s: float
    decisions: Mapping[str, int] = field(default_factory=dict)


@dataclass
class LoopResult:
    cycles: list[Cycle]
    placement_flow_mods: int  # the placed jobs' own entries, sent once before traffic
    path_changes_per_flow: np.ndarray
    final_rates: np.ndarray
    wall_s: float


Progress = Callable[[float, float, "Cycle"], None]


@dataclass(frozen=True)
class _PhaseView:
    index: int
    capacity: np.ndarray
    base: np.ndarray  # per flow: its route on the underlay (or its job's steering)
    down: np.ndarray  # per egress
    started: np.ndarray  # per flow
    natural: np.ndarray  # per flow: its natural demand (figures.natural_demand)


@dataclass(frozen=True)
class _Solution:
    signature: tuple[int, bytes, bytes]  # phase, routes, demands: what the rates depend on
    rates: np.ndarray
    loads: np.ndarray
    collided: int


def phases_of(flows: Sequence[SimFlow], events: Sequence[tuple[float, str]]) -> list[Phase]:
    """Boundaries at every flow start and link event."""
    starts = np.fromiter((f.start_s for f in flows), dtype=float, count=len(flows))
    times = sorted({0.0, *starts.tolist(), *(at for at, _ in events)})
    return [Phase(t, tuple(name for at, name in events if at <= t), starts <= t + 1e-12) for t in times if t >= 0.0]


class ClosedLoop:
    def __init__(
        self,
        fabric: Fabric,
        routes: Routes,
        flows: Sequence[SimFlow],
        hashes: np.ndarray,
        phases: Sequence[Phase],
        settings: LoopSettings,
        intent: Intent | None = None,
        acks: AckRoutes | None = None,
    ) -> None:
        self.fabric = fabric
        self.acks = acks  # None: no link ever dies, so no ACK stream can be cut
        self.routes = routes
        self.network = routes.network
        self.flows = list(flows)
        self.hashes = hashes
        self.phases = list(phases)
        self.settings = settings
        self.intent = intent or Intent()
        self.keys = [f.key for f in self.flows]
        self.index = {key: i for i, key in enumerate(self.keys)}
        n = len(self.flows)
        self.demand = np.fromiter((f.demand_bps for f in self.flows), dtype=float, count=n)
        # A placed job's flow crosses its job's via (its entries outrank TE's).
        self.steered_route = np.array(
            [routes.by_via[i].get(f.via, -1) if f.via else -1 for i, f in enumerate(self.flows)], dtype=np.int64
        )
        self.steered = self.steered_route >= 0
        self.egress_objects = self.network.egresses
        self.pairs = [(f.src, f.dst) for f in self.flows]
        self.job_via = [f.via for f in self.flows]

    def _phase_view(self, index: int) -> _PhaseView:
        """The fabric in a phase: capacities with its dead links at 0, and
        where the underlay (or a placed job) sends each flow then."""
        phase = self.phases[index]
        capacity = self.network.capacity_without(phase.dead)
        hashed = ecmp_routes(self.routes, self.hashes, self.routes.ingress_usable(capacity))
        return _PhaseView(
            index,
            capacity,
            np.where(self.steered, self.steered_route, hashed),
            capacity <= 0,
            phase.started,
            natural_demand(self.routes, self.flows, phase.started),
        )

    def run(self, progress: Progress | None = None) -> LoopResult:
        # Without the cyclic collector: a full collection over the fabric's,
        # the engine's and the telemetry's objects costs more than a cycle on
        # a 16K-GPU fabric and would land in whichever part allocated last.
        # Per-cycle garbage is freed by reference counting; young cycles are
        # swept now and then.
        automatic = gc.isenabled()
        gc.disable()
        try:
            return self._run(progress)
        finally:
            if automatic:
                gc.enable()

    def _run(self, progress: Progress | None) -> LoopResult:
        s = self.settings
        cfg = s.engine
        routes, network = self.routes, self.network
        n = len(self.flows)
        rng = np.random.default_rng(s.seed)
        cycles_total = max(round(s.duration_s / s.interval_s), 1)
        phase_starts = [p.start_s for p in self.phases]

        state = TeState()
        te_route = np.full(n, -1, dtype=np.int64)
        landed: dict[int, str] = {}  # flow index -> via of its TE move in the switches
        stalled_for: tuple[int, frozenset] | None = None
        stalled = np.zeros(n, dtype=bool)
        meter_cap = np.full(n, np.inf)
        pending: list[tuple[float, dict[FlowKey, str], dict[FlowKey, float]]] = []
        counter = FlowModCounter(self.fabric, self.intent)

        view = self._phase_view(0)
        solution: _Solution | None = None
        current_route = np.full(n, -1, dtype=np.int64)
        changes = np.zeros(n, dtype=np.int64)
        ewma = np.zeros(network.size)
        seen_port = np.zeros(network.size, dtype=bool)
        bytes_total = np.zeros(n)
        cycles: list[Cycle] = []
        started_wall = time.perf_counter()

        for k in range(1, cycles_total + 1):
            now = k * s.interval_s
            t0 = time.perf_counter()
            # 1. the fabric at `now`
            p = bisect.bisect_right(phase_starts, now + 1e-9) - 1
            if p != view.index:
                view = self._phase_view(p)
            while pending and pending[0][0] <= now + 1e-9:
                _, moved, metered = pending.pop(0)
                te_route[:] = -1
                landed = {}
                for key, via in moved.items():
                    i = self.index.get(key)
                    if i is not None:
                        te_route[i] = routes.by_via[i].get(via, -1)
                        landed[i] = via
                meter_cap[:] = np.inf
                for key, rate in metered.items():
                    i = self.index.get(key)
                    if i is not None:
                        meter_cap[i] = rate
            route = np.where(te_route >= 0, te_route, view.base)  # a TE move outranks a job's pair entry
            moved_now = (route != current_route) & (current_route >= 0)
            changes += moved_now
            current_route = route
            demand = np.where(view.started, np.minimum(self.demand, meter_cap), 0.0)
            if self.acks is not None:
                if stalled_for != (view.index, frozenset(landed.items())):
                    stalled_for = (view.index, frozenset(landed.items()))
                    steer = ack_steering(self.job_via, self.pairs, landed, self.acks)
                    stalled = self.acks.stalled(view.capacity, steer)
                demand = np.where(stalled, 0.0, demand)
            signature = (view.index, route.tobytes(), demand.tobytes())
            if solution is None or solution.signature != signature:
                shares = routes.shares(route)
                rates = max_min_rates(shares, view.capacity, demand)
                solution = _Solution(
                    signature,
                    rates,
                    link_loads(shares, rates),
                    collided_uplinks(shares, view.natural, network.is_uplink, view.capacity),
                )
            t1 = time.perf_counter()

            # 2. telemetry
            bytes_total += solution.rates * s.interval_s
            flows, ports = self._telemetry(now, solution, route, view, bytes_total, ewma, seen_port, rng)
            t2 = time.perf_counter()

            # 3. the engine
            before = state
            state, decisions = step(
                self.fabric, before, flows, ports, now, cfg, Drains(), self.intent.pinned_pairs, self.intent.job_pairs
            )
            t3 = time.perf_counter()

            # 4. the overlay and what reconciling it would send
            flow_mods = meter_mods = 0
            if _changed(before, state):
                flow_mods, meter_mods = counter.update(state.moves, state.meters)
                pending.append(
                    (
                        now + s.latency_s,
                        {key: m.via for key, m in state.moves.items()},
                        {key: m.rate_bps for key, m in state.meters.items()},
                    )
                )
            t4 = time.perf_counter()

            kinds = Counter(d.kind.value for d in decisions)
            cycle = Cycle(
                t=now,
                phase=view.index,
                aggregate_bps=float(solution.rates.sum()),
                collided_uplinks=solution.collided,
                engine_collisions=len(state.collisions),
                reroutes=kinds.get(DecisionKind.REROUTE.value, 0),
                moves_active=len(state.moves),
                meters_active=len(state.meters),
                flow_mods=flow_mods,
                meter_mods=meter_mods,
                path_changes=int(moved_now.sum()),
                step_s=t3 - t2,
                fluid_s=t1 - t0,
                telemetry_s=t2 - t1,
                overlay_s=t4 - t3,
                decisions=dict(kinds),
            )
            cycles.append(cycle)
            if progress is not None:
                progress(now, cycles_total * s.interval_s, cycle)
            if k % GC_EVERY_CYCLES == 0:
                gc.collect(1)
        final = solution.rates if solution is not None else np.zeros(n)
        return LoopResult(cycles, counter.placement_mods, changes, final, time.perf_counter() - started_wall)

    def _telemetry(
        self,
        now: float,
        solution: _Solution,
        route: np.ndarray,
        view: _PhaseView,
        bytes_total: np.ndarray,
        ewma: np.ndarray,
        seen: np.ndarray,
        rng: np.random.Generator,
    ) -> tuple[dict[FlowKey, FlowSample], dict[Endpoint, PortSample]]:
        rates, loads, started, down = solution.rates, solution.loads, view.started, view.down
        noise = self.settings.noise
        n = len(self.flows)
        flow_noise = 1.0 + rng.uniform(-noise, noise, n) if noise else np.ones(n)
        port_noise = 1.0 + rng.uniform(-noise, noise, len(loads)) if noise else np.ones(len(loads))
        on = np.flatnonzero(started)
        measured = (rates * flow_noise)[on].tolist()
        counted = bytes_total[on].astype(np.int64).tolist()
        ingress = self.routes.first_hop(route[on], on).tolist()
        egresses = self.egress_objects
        keys = self.keys
        flows = {
            keys[i]: FlowSample(rate, total, now, egresses[hop])
            for i, rate, total, hop in zip(on.tolist(), measured, counted, ingress)
        }
        sample = loads * port_noise
        # The LinkView's smoothing: the first sample as is, then an EWMA.
        ewma[:] = np.where(seen, EWMA_ALPHA * sample + (1 - EWMA_ALPHA) * ewma, sample)
        seen |= sample > 0
        report = np.flatnonzero(self.network.is_switch_port & ((ewma > 0) | down))
        ports = {
            egresses[j]: PortSample(tx, 0, 0, now, up)
            for j, tx, up in zip(report.tolist(), ewma[report].tolist(), (~down[report]).tolist())
        }
        return flows, ports


def _changed(before: TeState, after: TeState) -> bool:
    """The TE runner's test for asking the reconciler for a pass."""
    return (
        before.moves.keys() != after.moves.keys()
        or any(after.moves[k].via != before.moves[k].via for k in after.moves)
        or {k: m.rate_bps for k, m in before.meters.items()} != {k: m.rate_bps for k, m in after.meters.items()}
    )
