"""The closed loop: fluid model -> telemetry -> the real TE engine -> the real
overlay -> paths -> rates, one TE cycle per telemetry interval. Pure: the
clock is simulated, and the only outputs are the per-cycle records and the
timeline's iterations.

Cycle k closes the interval ((k-1) x interval, k x interval]:

1. the fluid model runs through the interval (timeline.py: bursts,
   iterations, completions), re-solved wherever the fabric changes: at an
   event (a link or switch dying or coming back, a drain) and where a move
   or meter the engine decided lands, `latency_s` after its cycle;
2. telemetry as the agent reports it (sensor.py): per flow the interval's
   byte delta, per loaded switch egress its mean load, each times a uniform
   noise factor, port rates smoothed like the controller's LinkView;
3. `controller.te.engine.step`, exactly as the TE runner calls it (with the
   placed jobs' steered pairs and the operator's drains at the time);
4. if its moves or meters changed (the TE runner's own test), the overlay is
   rendered by the real overlay code and diffed per switch by the
   reconciler's `diff_table` (flowmods.py): the flow-mods that pass would send.
"""

from __future__ import annotations

import gc
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from controller.fabric import Fabric
from controller.intent.model import Intent
from controller.te.engine import DecisionKind, Engine, EngineConfig, Snapshot, TeState, path_changed
from controller.te.headroom import reserved_egresses
from controller.te.view import FlowKey
from emulation.model.fluid import link_loads
from emulation.model.sharing import Sharing
from emulation.simulate.bound import credited
from emulation.simulate.conditions import Condition, at
from emulation.simulate.figures import collided_uplinks, natural_demand
from emulation.simulate.flowmods import FlowModCounter
from emulation.simulate.prepared import Prepared, Routing
from emulation.simulate.sensor import Sensor
from emulation.simulate.timeline import Timeline

GC_EVERY_CYCLES = 50


@dataclass(frozen=True)
class LoopSettings:
    interval_s: float = 0.2
    noise: float = 0.3
    latency_s: float = 0.05
    duration_s: float = 10.0
    engine: EngineConfig = field(default_factory=EngineConfig)
    seed: int = 0
    resolve_s: float = 0.0  # the timeline's coalescing of completions (timeline.py)
    sharing: Sharing = Sharing.PROPORTIONAL
    # When traffic or links change (Workload.traffic_changes): path changes are counted per change.
    changes_s: tuple[float, ...] = ()
    # Who installs the underlay: "fabric" (the emulation's own select groups)
    # or "controller", whose groups keep unpinned traffic off the uplinks
    # placed jobs fill (controller/te/headroom.py).
    underlay: str = "fabric"

    @property
    def cycles(self) -> int:
        return max(round(self.duration_s / self.interval_s), 1)

    @property
    def simulated_s(self) -> float:
        """Whole TE cycles: what every arm of a run simulates."""
        return self.cycles * self.interval_s


@dataclass(frozen=True)
class Cycle:
    t: float
    phase: int  # the condition of the fabric at t
    aggregate_bps: float  # of the rates in effect at t, before this cycle's step
    collided_uplinks: int  # by the sending flows' natural demands (figures.collided_uplinks)
    engine_collisions: int  # uplinks the engine itself calls collided after its step
    reroutes: int  # REROUTE decisions of this step
    moves_active: int
    meters_active: int
    flow_mods: int  # entries this cycle's reconcile pass would add, change or delete
    meter_mods: int
    path_changes: int  # flows whose path changed in the interval (moves landing, failover)
    step_s: float
    # The step's CPU time, on the engine's own thread (as the daemon's TE runner
    # paces it): on a shared machine a neighbour's load stretches wall time, not
    # this. Not the process's: OpenBLAS's helper threads spin ~0.1 s after each
    # of the fluid model's proportional-fair solves, and perf put a third of a
    # meta-32k run's samples in that spin, ~90 ms billed to each step after a
    # re-solve.
    step_cpu_s: float
    fluid_s: float
    telemetry_s: float
    overlay_s: float
    decisions: Mapping[str, int] = field(default_factory=dict)
    # The rates each flow counted up to its optimum rate (goodput.yardstick); nan without one.
    credited_bps: float = math.nan


@dataclass
class LoopResult:
    cycles: list[Cycle]
    placement_flow_mods: int  # the placed jobs' own entries, sent once before traffic
    path_changes_per_flow: np.ndarray
    path_changed_at: list[tuple[float, np.ndarray]]  # when, and which flows' paths changed
    final_rates: np.ndarray
    wall_s: float
    timeline: Timeline


Progress = Callable[[float, float, "Cycle"], None]


@dataclass
class _Landed:
    """The engine's moves and meters as the switches have them."""

    route: np.ndarray  # per flow: its TE move's route, -1 where it has none
    via: dict[int, str] = field(default_factory=dict)  # flow index -> via of its move
    meter: np.ndarray | None = None  # per flow: its meter's rate, inf where none


Pending = tuple[float, dict[FlowKey, str], dict[FlowKey, float]]  # (lands at, moves' vias, meters' rates)


@dataclass
class _InFlight:
    """What the switches carry from one cycle to the next: the TE entries
    landed, those on their way (a pass's flow-mods land `latency_s` after
    its cycle), and the route each flow was last on."""

    landed: _Landed
    pending: list[Pending]
    route: np.ndarray


@dataclass(frozen=True)
class _Interval:
    """The fluid model through one interval: where it ended, and what it carried."""

    condition: int  # of the fabric at the interval's end
    routing: Routing
    route: np.ndarray
    link_bits: np.ndarray
    flow_bits: np.ndarray
    moved: np.ndarray  # per flow: its path changed in the interval
    changed_at: list[tuple[float, np.ndarray]]  # when in the interval, and which flows


class ClosedLoop:
    def __init__(
        self,
        fabric: Fabric,
        prep: Prepared,
        conditions: Sequence[Condition],
        settings: LoopSettings,
        intent: Intent | None = None,
        yardstick: Callable[[float], np.ndarray] | None = None,
    ) -> None:
        self.fabric = fabric
        self.prep = prep
        self.routes = prep.routes
        self.network = prep.network
        self.flows = prep.arm.flows
        self.conditions = list(conditions)
        self.starts = [c.start_s for c in self.conditions]
        self.settings = settings
        self.intent = intent or Intent()
        self.yardstick = yardstick
        self.index = {f.key: i for i, f in enumerate(self.flows)}
        self._underlay: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # condition -> (capacity, route)
        self._stalled: tuple[tuple, np.ndarray] | None = None
        self._routing: tuple[tuple, Routing] | None = None

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

    def _underlay_at(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        if c not in self._underlay:
            capacity = self.network.capacity_without(self.conditions[c].dead)
            reserved = self._reserved(capacity) if self.settings.underlay == "controller" else None
            self._underlay[c] = (capacity, self.prep.underlay_route(capacity, reserved))
        return self._underlay[c]

    def _reserved(self, capacity: np.ndarray) -> np.ndarray:
        """Per egress: kept out of the controller's hash for the placed jobs, with these links up."""
        network = self.network
        down = [network.egresses[i] for i in np.flatnonzero(capacity <= 0)]
        mask = np.zeros(network.size, dtype=bool)
        for egress in reserved_egresses(self.fabric, self.intent.jobs.values(), down):
            mask[network.index[egress]] = True
        return mask

    def _routing_at(self, c: int, landed: _Landed) -> tuple[Routing, np.ndarray]:
        """The routing in condition c with the landed moves and meters (memoised)."""
        capacity, base = self._underlay_at(c)
        route = np.where(landed.route >= 0, landed.route, base)  # a TE move outranks a job's pair entry
        cap = np.full(len(self.flows), np.inf) if landed.meter is None else landed.meter
        if self.prep.acks is not None:
            stall_key = (c, frozenset(landed.via.items()))
            if self._stalled is None or self._stalled[0] != stall_key:
                self._stalled = (stall_key, self.prep.stalled(capacity, landed.via))
            cap = np.where(self._stalled[1], 0.0, cap)
        key = (c, route.tobytes(), cap.tobytes())
        if self._routing is None or self._routing[0] != key:
            self._routing = (key, self.prep.routing(self.routes.shares(route), capacity, cap, self.settings.sharing))
        return self._routing[1], route

    def _run(self, progress: Progress | None) -> LoopResult:
        s = self.settings
        rng = np.random.default_rng(s.seed)
        timeline = Timeline(self.flows, self.prep.arm.jobs, s.simulated_s, s.resolve_s)
        engine = Engine(self.fabric, s.engine)  # this loop's own: two loops in a process share nothing
        sensor = Sensor(self.network, self.routes, [f.key for f in self.flows], s.noise, engine.index)

        state = TeState()
        changes = np.zeros(len(self.flows), dtype=np.int64)
        flight = _InFlight(_Landed(np.full_like(changes, -1)), [], np.full_like(changes, -1))
        counter = FlowModCounter(self.fabric, self.intent)
        changed_at: list[tuple[float, np.ndarray]] = []
        cycles: list[Cycle] = []
        rates = np.zeros(len(self.flows))
        started_wall = time.perf_counter()

        for k in range(1, s.cycles + 1):
            now = k * s.interval_s
            t0 = time.perf_counter()
            # 1. the fluid model through the interval, stretch by stretch
            interval = self._fluid(timeline, flight, now)
            changes += interval.moved
            changed_at.extend(interval.changed_at)
            timeline.fire()
            rates = timeline.rates(interval.routing)
            sending = timeline.on
            capacity = interval.routing.capacity
            natural = natural_demand(self.routes, self.flows, sending)
            collided = collided_uplinks(interval.routing.shares, natural, self.network.is_uplink, capacity)
            t1 = time.perf_counter()

            # 2. telemetry
            flows, ports = sensor.sample(
                now, s.interval_s, interval.flow_bits, sending, interval.link_bits, interval.route, capacity <= 0, rng
            )
            t2 = time.perf_counter()

            # 3. the engine
            before = state
            drains = self.conditions[interval.condition].drains
            cpu = time.thread_time()
            state, decisions = engine.step(
                before, Snapshot(flows, ports, now, drains, self.intent.pinned_pairs, self.intent.job_pairs)
            )
            t3 = time.perf_counter()
            cpu = time.thread_time() - cpu

            # 4. the overlay and what reconciling it would send
            flow_mods, meter_mods = self._overlay(counter, flight, before, state, now)
            t4 = time.perf_counter()

            kinds = Counter(d.kind.value for d in decisions)
            cycle = Cycle(
                t=now,
                phase=interval.condition,
                aggregate_bps=float(rates.sum()),
                collided_uplinks=collided,
                engine_collisions=len(state.collisions),
                reroutes=kinds.get(DecisionKind.REROUTE.value, 0),
                moves_active=len(state.moves),
                meters_active=len(state.meters),
                flow_mods=flow_mods,
                meter_mods=meter_mods,
                path_changes=int(interval.moved.sum()),
                step_s=t3 - t2,
                step_cpu_s=cpu,
                fluid_s=t1 - t0,
                telemetry_s=t2 - t1,
                overlay_s=t4 - t3,
                decisions=dict(kinds),
                credited_bps=math.nan if self.yardstick is None else credited(rates, self.yardstick(now)),
            )
            cycles.append(cycle)
            if progress is not None:
                progress(now, s.simulated_s, cycle)
            if k % GC_EVERY_CYCLES == 0:
                gc.collect(1)
        return LoopResult(
            cycles, counter.placement_mods, changes, changed_at, rates, time.perf_counter() - started_wall, timeline
        )

    def _overlay(
        self, counter: FlowModCounter, flight: _InFlight, before: TeState, state: TeState, now: float
    ) -> tuple[int, int]:
        """The flow-mods and meter-mods the step's reconcile pass sends, if
        its moves or meters changed; they land `latency_s` from now."""
        if not path_changed(before, state):
            return 0, 0
        mods = counter.update(state.moves, state.meters)
        moved = {key: m.via for key, m in state.moves.items()}
        flight.pending.append((now + self.settings.latency_s, moved, {k: m.rate_bps for k, m in state.meters.items()}))
        return mods

    def _fluid(self, timeline: Timeline, flight: _InFlight, now: float) -> _Interval:
        """Runs the timeline up to `now`, re-solved at every event and landing on the way."""
        n = len(self.flows)
        link_bits = np.zeros(self.network.size)
        flow_bits = np.zeros(n)
        moved_now = np.zeros(n, dtype=bool)
        changed_at: list[tuple[float, np.ndarray]] = []
        while True:
            while flight.pending and flight.pending[0][0] <= timeline.t + 1e-9:
                flight.landed = self._land(*flight.pending.pop(0)[1:])
            c = at(self.conditions, timeline.t)
            routing, route = self._routing_at(c, flight.landed)
            changed = (route != flight.route) & (flight.route >= 0)
            if changed.any():
                changed_at.append((timeline.t, np.flatnonzero(changed)))
                moved_now |= changed
            flight.route = route
            if timeline.t >= now - 1e-9:
                return _Interval(c, routing, route, link_bits, flow_bits, moved_now, changed_at)
            later = [t for t in (*self.starts, *(p[0] for p in flight.pending)) if t > timeline.t + 1e-9]
            timeline.advance(min([now, *later]), routing)
            moved = timeline.take_moved()
            flow_bits += moved
            link_bits += link_loads(routing.shares, moved)

    def _land(self, moved: dict[FlowKey, str], metered: dict[FlowKey, float]) -> _Landed:
        """The switches' TE entries once a pass's flow-mods are in."""
        n = len(self.flows)
        landed = _Landed(np.full(n, -1, dtype=np.int64))
        for key, via in moved.items():
            i = self.index.get(key)
            if i is not None:
                landed.route[i] = self.routes.by_via[i].get(via, -1)
                landed.via[i] = via
        if metered:
            landed.meter = np.full(n, np.inf)
            for key, rate in metered.items():
                i = self.index.get(key)
                if i is not None:
                    landed.meter[i] = rate
        return landed
