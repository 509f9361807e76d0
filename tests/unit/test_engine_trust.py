"""The engine on shapes the demo fabric hides: uplinks narrower than a NIC,
more elephants per leaf than uplinks, and a fabric-wide permutation. Moves
settle, never leave the fabric worse than the hash, and one cycle fixes
every fixable collision."""

import math
import random
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.fabric import NicId, build_fabric, parse_spec
from controller.te.engine import Engine, EngineConfig, FlowFrame, Snapshot, TeState
from controller.te.engine.elephants import find_elephants
from controller.te.engine.maxmin import fill_paths
from controller.te.engine.state import Elephants, Move, PathChanges, Recent
from controller.te.view import FlowSample, LinkView, PortSample
from emulation.model.fair import max_min_rates
from emulation.model.network import ModelFlow, Units
from emulation.model.optimum import optimum_bounds
from tests.unit.test_engine import FABRIC, World, collided_world, engine, flow_key, step

RATES = "rates: {nic_gbps: 400, emulated_nic_mbps: 50}\n"
# 3 spines over 2 servers per pod at 1:1: every uplink is 2/3 of a NIC.
NARROW = build_fabric(parse_spec("pods: 3\nservers_per_pod: 2\nrails: 2\nspines: 3\noversubscription: 1.0\n" + RATES))
# Per plane, 3 elephants per leaf over 2 uplinks of 1.5 NICs: two must share even at best.
CROWDED = build_fabric(parse_spec("pods: 2\nservers_per_pod: 3\nrails: 2\nspines: 2\nplane_mode: per-rail\n" + RATES))
WIDE = build_fabric(parse_spec("pods: 4\nservers_per_pod: 8\nrails: 2\nspines: 8\nplane_mode: per-rail\n" + RATES))


def elephants_in(fabric, flows, recent=None, planned=frozenset(), now=100.0) -> Elephants:
    catalog = engine(fabric).catalog
    frame = FlowFrame.of(catalog.index, flows)
    cat = catalog.rows(frame.keys)
    return find_elephants(catalog, frame, cat, {}, recent or Recent(), now, EngineConfig(), planned)[0]


def permutation(fabric, seed):
    """Every NIC to its twin in the next pod, on a seeded random spine (the hash)."""
    rng = random.Random(seed)
    flows: dict[tuple, tuple[NicId, NicId, str]] = {}
    for nic in fabric.nics:
        dst = NicId(nic.rail, (nic.pod + 1) % fabric.spec.pods, nic.server)
        flows[flow_key(nic, dst, 40000 + len(flows))] = (nic, dst, rng.choice(fabric.vias(nic, dst)))
    return World(fabric, flows)


def aggregate(world, moves):
    flows, _ = world.telemetry(0.0, moves)
    return sum(s.rate_bps for s in flows.values())


def run(world, cycles, noise, seed):
    rng = random.Random(seed)
    state, moves_at = TeState(), []
    for i in range(cycles):
        now = 100.0 + 0.2 * i
        flows, ports = world.telemetry(now, state.moves, noise, rng)
        state, decisions = step(world.fabric, state, flows, ports, now)
        moves_at += [now - 100.0 for d in decisions if d.kind in ("reroute", "revert")]
    return state, moves_at


@pytest.mark.parametrize("fabric", [NARROW, CROWDED], ids=["narrow-uplinks", "crowded-leaves"])
@pytest.mark.parametrize("seed", range(5))
def test_moves_settle_and_never_end_below_the_hash(fabric, seed):
    world = permutation(fabric, seed)
    state, moves_at = run(world, cycles=50, noise=0.3, seed=seed)
    assert aggregate(world, state.moves) >= aggregate(world, {}) * (1 - 1e-9)
    assert [t for t in moves_at if t >= 2.0] == [], "moves after the first 2 s of steady traffic"
    assert len(moves_at) <= 2 * len(world.flows)


@pytest.mark.parametrize("fabric", [NARROW, CROWDED], ids=["narrow-uplinks", "crowded-leaves"])
def test_an_optimal_assignment_is_left_alone_under_noise(fabric):
    world = permutation(fabric, seed=1)
    settled, _ = run(world, cycles=20, noise=0.0, seed=1)
    # The settled routing as the hash's: nothing a fabric with TE could still improve.
    best = World(fabric, {k: (s, d, settled.moves[k].via if k in settled.moves else v)
                          for k, (s, d, v) in world.flows.items()})  # fmt: skip
    state, moves_at = run(best, cycles=100, noise=0.3, seed=7)
    assert moves_at == [] and state.moves == {}


def test_a_narrow_uplink_carrying_one_elephant_is_no_collision():
    a, b = NicId(0, 0, 0), NicId(0, 1, 0)
    world = World(NARROW, {flow_key(a, b, 40001): (a, b, NARROW.vias(a, b)[0])})
    flows, ports = world.telemetry(100.0, {})
    state, decisions = step(NARROW, TeState(), flows, ports, 100.0)
    assert decisions == [] and state.collisions == frozenset() and state.unfixable == frozenset()


def test_sharing_the_best_routing_also_shares_is_reported_once_as_unfixable():
    # Three elephants from one leaf over two uplinks: one uplink carries two whatever TE does.
    dsts = [NicId(0, 1, s) for s in range(3)]
    flows = {flow_key(NicId(0, 0, s), d, 40000 + s): (NicId(0, 0, s), d, "ryr0s0") for s, d in enumerate(dsts)}
    world = World(CROWDED, flows)
    state, kinds = TeState(), list[str]()
    for i in range(10):
        now = 100.0 + 0.2 * i
        state, decisions = step(CROWDED, state, *world.telemetry(now, state.moves), now)
        kinds += [d.kind for d in decisions]
    assert kinds.count("reroute") == 1  # off the uplink carrying three, onto the free one
    assert kinds.count("unfixable") == 1 and len(state.unfixable) == 1


def test_a_link_only_a_resting_flow_can_free_is_a_collision_searched_again_not_unfixable():
    # A was moved onto rys0 a second ago and rests; B is pinned beside it. A's
    # way out (rys1 into pod 1) is C's: only A and C swapping spines frees both.
    spec = "pods: 3\nservers_per_pod: 2\nrails: 1\nspines: 2\noversubscription: 1.0\n"
    fabric = build_fabric(parse_spec(spec + RATES))
    a, b, c = (NicId(0, 0, 0), NicId(0, 1, 0)), (NicId(0, 0, 1), NicId(0, 2, 0)), (NicId(0, 2, 1), NicId(0, 1, 1))
    ka, kb, kc = (flow_key(*pair, 40001 + n) for n, pair in enumerate((a, b, c)))
    world = World(fabric, {ka: (*a, "rys1"), kb: (*b, "rys0"), kc: (*c, "rys1")})
    state = TeState(moves={ka: Move(ka, *a, "rys0", 99.0, 99.0, "rys1")})
    seen = []
    for i in range(25):
        now = 100.0 + 0.2 * i
        state, decisions = step(fabric, state, *world.telemetry(now, state.moves), now, steered=frozenset({b}))
        seen += [(now, d.kind, d.reason) for d in decisions]
    assert [kind for _, kind, _ in seen if kind != "reroute"] == ["collision"]
    assert "1 of them rest after a move, searched again in 2.0 s" in seen[0][2]
    assert {state.moves[k].via for k in (ka, kc)} == {"rys1", "rys0"} and state.moves[ka].via == "rys1"
    assert all(now >= 102.0 for now, kind, _ in seen if kind == "reroute")  # once A rested: a plan of two
    assert aggregate(world, state.moves) == pytest.approx(3 * 400e9)


def test_one_cycle_fixes_every_collision_of_a_fabric_wide_permutation():
    world = permutation(WIDE, seed=3)
    flows, ports = world.telemetry(100.0, {})
    assert aggregate(world, {}) < 0.8 * len(world.flows) * 400e9  # the hash collides
    state, decisions = step(WIDE, TeState(), flows, ports, 100.0)
    assert len([d for d in decisions if d.kind == "reroute"]) > 4  # not capped at a few per cycle
    assert aggregate(world, state.moves) == pytest.approx(len(world.flows) * 400e9)
    _, ports = world.telemetry(100.2, state.moves)
    assert all(p.tx_bps <= WIDE.capacity_bps[e] * (1 + 1e-9) for e, p in ports.items())


def _flows_to(dst, senders):
    return {flow_key(s, dst, 41000 + i): (s, dst, "ryr0s0") for i, s in enumerate(senders)}


def test_a_placed_jobs_flows_are_never_metered_as_incast_senders():
    # Three of a job's NICs send to one receiver, as an all-to-all does to every NIC.
    dst = NicId(0, 1, 0)
    senders = [NicId(0, 0, s) for s in range(3)]
    udp = {(a, b, "udp", sport, 4791): path for (a, b, _, sport, _), path in _flows_to(dst, senders).items()}
    world = World(CROWDED, udp)
    flows, ports = world.telemetry(100.0, {})
    flows = {k: replace(s, rate_bps=400e9) for k, s in flows.items()}  # each offers its NIC, as UDP does
    state, decisions = step(CROWDED, TeState(), flows, ports, 100.0, jobs=frozenset((s, dst) for s in senders))
    assert state.meters == {} and "incast" not in [d.kind for d in decisions]
    state, _ = step(CROWDED, TeState(), flows, ports, 100.0)
    assert state.meters  # the same traffic from strangers is an incast


def test_a_placed_jobs_collided_flows_are_rebalanced():
    world = collided_world()
    flows, ports = world.telemetry(100.0, {})
    jobs = frozenset((s, d) for s, d, _ in world.flows.values())
    state, decisions = step(world.fabric, TeState(), flows, ports, 100.0, jobs=jobs)
    assert [str(d.kind) for d in decisions].count("reroute") == 1 and len(state.moves) == 1


def test_an_idle_placed_job_takes_no_share_of_the_nics_it_would_use():
    # The job is placed on the colliding NICs but sends nothing: the two
    # elephants still ask for whole NICs, so their collision is still fixed.
    world = collided_world()
    flows, ports = world.telemetry(100.0, {})
    (a, c, _), (b, d, _) = world.flows.values()
    idle_job = frozenset({(a, d), (b, c), (c, a), (d, b)})
    _, decisions = step(world.fabric, TeState(), flows, ports, 100.0, jobs=idle_job)
    assert [str(x.kind) for x in decisions].count("reroute") == 1


def test_a_placed_jobs_starved_flow_still_shares_its_nic():
    # Two flows leave one NIC; the job's second one is starved right now
    # (under 1% of the NIC). As the job's, it still halves the first one's
    # demand: a collective's flows take turns being starved, and a demand
    # that jumps with them would move flows back and forth.
    src, dst, other = NicId(0, 0, 0), NicId(0, 1, 0), NicId(0, 1, 1)
    fast, starved = flow_key(src, dst, 41000), flow_key(src, other, 41001)
    flows = {
        fast: FlowSample(380e9, 0, 100.0, FABRIC.egress_path(src, dst, "rys0")[1]),
        starved: FlowSample(1e9, 0, 100.0, FABRIC.egress_path(src, other, "rys1")[1]),
    }
    as_job = elephants_in(FABRIC, flows, planned=frozenset({(src, dst), (src, other)}))
    alone = elephants_in(FABRIC, flows)
    assert as_job.demand_bps.tolist() == [200e9] and alone.demand_bps.tolist() == [400e9]


LARGE = build_fabric(parse_spec("pods: 4\nservers_per_pod: 64\nrails: 1\nspines: 64\nplane_mode: per-rail\n" + RATES))


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**16), st.integers(64, 256))
def test_no_link_stays_over_capacity_when_a_feasible_assignment_exists_at_hundreds_of_flows(seed, count):
    # Distinct senders and receivers, one pod to the next: with one uplink per
    # server, one elephant per uplink is always feasible (a permutation routes
    # without collision on a full-bisection Clos).
    rng = random.Random(seed)
    senders = rng.sample(list(LARGE.nics), count)
    flows: dict[tuple, tuple[NicId, NicId, str]] = {}
    for s in senders:
        d = NicId(s.rail, (s.pod + 1) % LARGE.spec.pods, s.server)
        flows[flow_key(s, d, 40000 + len(flows))] = (s, d, rng.choice(LARGE.vias(s, d)))
    world = World(LARGE, flows)
    state = TeState()
    for i in range(3):
        now = 10.0 + 0.2 * i
        state, _ = step(LARGE, state, *world.telemetry(now, state.moves), now)
    _, ports = world.telemetry(20.0, state.moves)
    assert all(p.tx_bps <= LARGE.capacity_bps[e] * (1 + 1e-9) for e, p in ports.items())


def _max_min(fabric, paths) -> list[float]:
    """Max-min fair rates of flows on these paths, ascending."""
    capacity = dict(fabric.capacity_bps)
    routes = [fabric.egress_path(s, d, v or None) for s, d, v in paths]
    return sorted(max_min_rates(capacity, routes, [math.inf] * len(paths)))


def _not_worse(a: list[float], b: list[float]) -> bool:
    """a >= b in the max-min sense: lexicographically on ascending rates."""
    for x, y in zip(a, b):
        if not math.isclose(x, y, rel_tol=1e-9):
            return x > y
    return True


def random_world(rng: random.Random, per_nic: int) -> World:
    """A small rail-optimized fabric (shared or per-rail spines, uplinks
    narrower, equal to or wider than a NIC) and a few cross-pod elephants on
    hashed spines, at most `per_nic` from or to any NIC: small enough that the
    single-path optimum is exact."""
    pods, servers, rails, spines = rng.randint(2, 3), rng.randint(1, 3), rng.randint(1, 2), rng.randint(2, 4)
    spec = f"pods: {pods}\nservers_per_pod: {servers}\nrails: {rails}\nspines: {spines}\noversubscription: 1.0\n"
    fabric = build_fabric(parse_spec(spec + f"plane_mode: {rng.choice(['shared', 'per-rail'])}\n" + RATES))
    nics = sorted(fabric.nics)
    ends: Counter[NicId] = Counter()
    flows: dict[tuple, tuple[NicId, NicId, str]] = {}
    for _ in range(rng.randint(2, 6)):
        src = rng.choice(nics)
        dsts = [n for n in nics if n.rail == src.rail and n.pod != src.pod and ends[n] < per_nic]
        if ends[src] >= per_nic or not dsts:
            continue
        dst = rng.choice(dsts)
        ends.update((src, dst))
        flows[flow_key(src, dst, 40000 + len(flows))] = (src, dst, rng.choice(fabric.vias(src, dst)))
    return World(fabric, flows)


def _settle(world):
    """The engine until 10 quiet cycles in a row; then one more cycle on the
    same data must move nothing. -> (settled, hashed) max-min rates, optimum."""
    state, quiet, now = TeState(), 0, 100.0
    while quiet < 10:
        assert now < 112.0, "the engine did not settle"
        flows, ports = world.telemetry(now, state.moves)
        state, decisions = step(world.fabric, state, flows, ports, now)
        quiet = 0 if any(d.kind in ("reroute", "revert") for d in decisions) else quiet + 1
        now += 0.2
    flows, ports = world.telemetry(now, state.moves)
    _, again = step(world.fabric, state, flows, ports, now)
    assert [d for d in again if d.kind in ("reroute", "revert")] == []
    settled = [(s, d, state.moves[k].via if k in state.moves else v) for k, (s, d, v) in world.flows.items()]
    hashed = list(world.flows.values())
    optimum = optimum_bounds(
        world.fabric, [ModelFlow(s, d) for s, d, _ in hashed], units=Units.REAL, limit=10**5
    ).single_path
    assert optimum is not None
    return _max_min(world.fabric, settled), _max_min(world.fabric, hashed), optimum.aggregate_bps


def _moved_then_slower(
    full_route: bool,
    full_receiver: bool = False,
    other_moved_off_s: float | None = None,
    world: World | None = None,
    changes_before: int = 0,
):
    """The collided `world` (two elephants on one spine; the demo fabric's
    by default) settles one move; 3.5 s on, the moved flow sends at a tenth
    of its rate, with its new route's links `full_route` (others fill them)
    or idle but for it, and its receiver's NIC `full_receiver` (others
    share it) or as slow as the flow; the other flow, with
    `other_moved_off_s`, moved off the moved one's route that long before.
    -> the reverts and reroutes of that cycle, and the move."""
    world = world or collided_world()
    fabric = world.fabric
    state, now = TeState(), 100.0
    while not state.moves:
        flows, ports = world.telemetry(now, state.moves)
        state, _ = step(fabric, state, flows, ports, now)
        now += 0.2
    ((key, move),) = state.moves.items()
    now = move.moved_at + EngineConfig().hysteresis_s + 0.5
    if changes_before:  # path changes the flow had had before this move
        count = state.changes[key].count + changes_before
        state = replace(state, changes={**state.changes, key: PathChanges(count, now)})
    if other_moved_off_s is not None:
        ((other, (src, dst, via)),) = [(k, flow) for k, flow in world.flows.items() if k != key]
        at = now - other_moved_off_s
        state = replace(state, moves={**state.moves, other: Move(other, src, dst, via, at, at, from_via=move.via)})
    flows, ports = world.telemetry(now, state.moves)
    rate = flows[key].rate_bps / 10
    flows[key] = replace(flows[key], rate_bps=rate)
    path = fabric.egress_path(move.src, move.dst, move.via)
    for hop in path[1:-1]:  # its uplink and the spine's downlink
        ports[hop] = PortSample(fabric.capacity_bps[hop] if full_route else rate, 0, 0, now)
    ports[path[0]] = PortSample(rate, 0, 0, now)
    ports[path[-1]] = PortSample(fabric.capacity_bps[path[-1]] if full_receiver else rate, 0, 0, now)
    _, decisions = step(fabric, state, flows, ports, now)
    return [d for d in decisions if d.kind in ("revert", "reroute")], move


def _kinds(decisions_and_move) -> list[str]:
    return [d.kind for d in decisions_and_move[0]]


def test_a_moved_flow_that_sends_less_on_a_route_with_room_stays():
    # Its iteration ended, or its sender slowed: the route did not hold it back.
    assert _kinds(_moved_then_slower(full_route=False)) == []


def test_a_moved_flow_held_back_by_a_full_route_goes_back():
    assert _kinds(_moved_then_slower(full_route=True))[:1] == ["revert"]


def test_a_moved_flow_whose_move_spent_its_last_path_change_stays_rather_than_change_a_third_time():
    # Hedera's randx5 seed 1: moved twice by plans of two, then sent back, three path changes.
    assert EngineConfig().max_path_changes == 2
    assert _kinds(_moved_then_slower(full_route=True, changes_before=1)) == []


def test_a_moved_flow_is_judged_only_on_samples_taken_since_its_route_last_changed():
    # Another flow moved off its route 0.3 s ago: the rate it measures is
    # still the one it had while they shared. Once the route has been as it
    # is for max_age_s, a flow still held back by it goes back.
    assert _kinds(_moved_then_slower(full_route=True, other_moved_off_s=0.3)) == []
    assert _kinds(_moved_then_slower(full_route=True, other_moved_off_s=EngineConfig().max_age_s + 0.1)) == ["revert"]


def test_what_a_cycle_plans_sees_the_flow_it_sends_back_where_it_goes():
    # Three spines; the moved flow goes back to the spine it shared with the
    # other: in that same cycle, the plan finds them sharing it and moves
    # the other, instead of planning as if the reverted flow were still
    # away (Hedera's hotspot, seed 1: a plan moved a third flow onto the
    # uplink a flow had just been sent back to, and both stayed there).
    a, b, c, d = NicId(0, 0, 0), NicId(0, 0, 1), NicId(0, 1, 0), NicId(0, 1, 1)
    shared = NARROW.vias(a, c)[0]
    world = World(NARROW, {flow_key(a, c, 40001): (a, c, shared), flow_key(b, d, 40002): (b, d, shared)})
    decisions, move = _moved_then_slower(full_route=True, world=world)
    reverted, rerouted = decisions
    assert (reverted.kind, reverted.flow, reverted.to_via) == ("revert", move.key, shared)
    assert rerouted.kind == "reroute" and rerouted.flow != move.key and rerouted.from_via == shared


def test_a_moved_flow_slower_at_a_full_receiver_stays():
    # Its NIC's other flows took its share there (TCP shares a NIC unevenly),
    # and would on any route: sent back and held, it would keep the collision
    # the move fixed until the traffic changes.
    assert _kinds(_moved_then_slower(full_route=True, full_receiver=True)) == []


WORLDS = 1000
WITHIN = 0.02  # of the exact single-path optimum


@pytest.mark.parametrize("per_nic", [1, 3], ids=["one-elephant-per-nic", "up-to-three-per-nic"])
def test_a_settled_engine_is_near_the_optimum_never_less_fair_than_the_hash_and_stays(per_nic):
    """Over 1,000 seeded random worlds: the engine settles and one more cycle
    moves nothing; never less fair than the hash (max-min, as the engine and
    the optimum judge; a move that lifts the slowest flow may lower the sum);
    and at least 99% of the worlds end within 2% of the exact single-path
    optimum. Single-flow moves alone reached 94.5% (one elephant per NIC) and
    95.5% (up to three): a flow that collides with two others on two links is
    freed only by a swap or a chain, which the joint search finds. Measured
    with it: every one of the 1,000 worlds, at both densities."""
    rng, fractions = random.Random(per_nic), []
    for _ in range(WORLDS):
        world = random_world(rng, per_nic)
        te, hashed, optimum = _settle(world)
        assert _not_worse(te, hashed), world.flows
        fractions.append(sum(te) / optimum)
    assert sum(f >= 1 - WITHIN - 1e-9 for f in fractions) >= 0.99 * WORLDS


class Iterating:
    """A world's flows iterating bulk-synchronously, as a placed collective
    does (send for `on_s`, compute for `off_s`), reported every `interval_s`
    as the agent and the LinkView report it: per flow that sent in the
    interval, its bytes over the interval (a flow on for half of it reports
    half its rate; one off all interval reports nothing), per loaded port
    its interval's mean load, each times a uniform noise factor; port rates
    smoothed by the LinkView's EWMA, flow records not."""

    def __init__(self, world, on_s=1.0, off_s=0.3, start_s=0.05, interval_s=0.2):
        self.world, self.on_s, self.period_s, self.start_s = world, on_s, on_s + off_s, start_s
        self.interval_s = interval_s
        self.view = LinkView()

    def on_fraction(self, now: float) -> float:
        t0, t1, on = now - self.interval_s, now, 0.0
        first = math.floor((t0 - self.start_s) / self.period_s)
        for k in range(first, first + 3):
            begin = self.start_s + k * self.period_s
            on += max(0.0, min(t1, begin + self.on_s) - max(t0, begin))
        return on / self.interval_s

    def telemetry(self, now, moves, noise, rng):
        on = self.on_fraction(now)
        flows, ports = self.world.telemetry(now, moves)  # the rates while the flows send
        records = {
            k: FlowSample(s.rate_bps * on * (1 + rng.uniform(-noise, noise)), 0, now, s.ingress)
            for k, s in flows.items()
            if on > 0
        }
        for egress, p in ports.items():
            self.view.observe_port(egress, PortSample(p.tx_bps * on * (1 + rng.uniform(-noise, noise)), 0, 0, now))
        return records, dict(self.view.ports)


def run_iterating(world, cycles, noise, seed, jobs=frozenset(), rehash=None):
    """`rehash`: (cycle, flow key, via): from that cycle on, the fabric sends
    that flow over that spine (a failover's new hash)."""
    rng, it, state = random.Random(seed), Iterating(world), TeState()
    index = engine(world.fabric).index
    # The links TE steers over (a leaf's downlink to a NIC is on no route: no elephant's to explain)
    spine_tier = sorted({int(h) for s, d, _ in world.flows.values() for h in index.routes(s, d).hops.ravel()})
    moves_at, residuals = [], []
    for i in range(1, cycles + 1):
        now = 100.0 + 0.2 * i
        if rehash is not None and i == rehash[0]:
            src, dst, _ = world.flows[rehash[1]]
            world.flows[rehash[1]] = (src, dst, rehash[2])
        flows, ports = it.telemetry(now, state.moves, noise, rng)
        state, decisions = step(world.fabric, state, flows, ports, now, jobs=jobs)
        moves_at += [round(now - 100.0, 1) for d in decisions if d.kind in ("reroute", "revert")]
        assert state.residual is not None
        residuals.append(float((state.residual / index.capacity)[spine_tier].max()))
    return state, moves_at, residuals


def spread_job(flows=4):
    """A placed ring's flows from one pod to the next, each alone on its own
    spine (half the spines idle): each fills its uplink (400G, as its NIC)
    exactly; nothing to improve."""
    nics = [(NicId(0, 0, s), NicId(0, 1, s)) for s in range(flows)]
    world = World(WIDE, {flow_key(a, b, 40000 + i): (a, b, WIDE.vias(a, b)[i]) for i, (a, b) in enumerate(nics)})
    return world, frozenset(nics)


def test_a_flow_that_stops_leaves_no_phantom_background_behind():
    # Without noise, what the ports send is exactly what the records explain.
    # The LinkView smooths port rates and not records: compared raw, each
    # compute gap left half the link as "background" (the port's EWMA tail,
    # no record to explain it) and the residual's EWMA carried a tenth of
    # the link into the next iteration.
    world, jobs = spread_job()
    state, moves_at, residuals = run_iterating(world, cycles=50, noise=0.0, seed=0, jobs=jobs)
    assert moves_at == [] and state.moves == {}
    assert max(residuals) < 0.01


def test_an_iterating_job_spread_perfectly_is_left_alone_under_noise():
    # The false collision of noisy, iterating traffic: each compute gap's
    # phantom background (above), plus the noise, put a one-elephant uplink
    # "over capacity" (400G of demand + 20% of background) just as an
    # iteration's partial first or last sample made its flow look squeezed,
    # and TE moved it to an idle spine the next job may well use. In these
    # 40 runs of 25 s it made 30 moves before the fix (in 18 runs). After
    # it, 3 (seeds 16, 32 and 39: now and then the noise alone lifts a
    # residual over the floor just as a partial sample comes in).
    world, jobs = spread_job()
    moves = []
    for seed in range(40):
        _, moves_at, _ = run_iterating(world, cycles=125, noise=0.3, seed=seed, jobs=jobs)
        moves += moves_at
    assert len(moves) <= 3


@pytest.mark.parametrize("seed", range(4))
def test_an_iterating_jobs_real_collision_is_still_fixed_at_once(seed):
    # The same traffic with two flows on one spine (a hash): on/off traffic is
    # no excuse; one moves within the first two cycles, and stays.
    world = collided_world()
    jobs = frozenset((s, d) for s, d, _ in world.flows.values())
    state, moves_at, _ = run_iterating(world, cycles=125, noise=0.3, seed=seed, jobs=jobs)
    assert len(moves_at) == 1 and moves_at[0] <= 0.4 and len(state.moves) == 1


@pytest.mark.parametrize("seed", range(4))
def test_a_spread_jobs_flow_rehashed_onto_anothers_spine_is_moved_off_it(seed):
    # A placed job spread perfectly until a failover sends one of its flows
    # over another's spine (cycle 30, 6 s in): a real collision of a placed
    # job; fixed within two cycles, with no other move before or after.
    world, jobs = spread_job()
    keys = list(world.flows)
    onto = world.flows[keys[1]][2]
    _, moves_at, _ = run_iterating(world, cycles=125, noise=0.3, seed=seed, jobs=jobs, rehash=(30, keys[0], onto))
    assert len(moves_at) == 1 and 6.0 <= moves_at[0] <= 6.4


def test_the_records_are_smoothed_once_per_port_sample_as_the_linkview_does():
    # A cycle can run between two telemetry batches (on a timer): the port
    # rate it sees is the one it saw last time, so the records' filter must
    # not step either, or the two drift apart and the gap reads as background.
    world, jobs = spread_job(flows=1)
    it, rng = Iterating(world), random.Random(0)
    flows, ports = it.telemetry(100.2, {}, 0.0, rng)
    state, _ = step(WIDE, TeState(), flows, ports, 100.2, jobs=jobs)
    flows, ports = it.telemetry(100.4, {}, 0.0, rng)
    state, _ = step(WIDE, state, flows, ports, 100.4, jobs=jobs)
    again, _ = step(WIDE, state, flows, ports, 100.45, jobs=jobs)  # no new batch
    assert state.explained is not None and again.explained is not None
    assert (again.explained == state.explained).all()
    ((src, dst, _),) = world.flows.values()
    uplinks = engine(WIDE).index.routes(src, dst).hops.ravel()
    assert again.residual is not None and float(abs(again.residual[uplinks]).max()) < 1e-3 * 400e9


THREE_TIER = build_fabric(
    parse_spec(
        "clusters: 2\npods: 2\nservers_per_pod: 2\nrails: 2\nspines: 2\n"
        "core: {switches: 4, oversubscription: 2}\n" + RATES
    )
)


@pytest.mark.parametrize("seed", range(5))
def test_behind_an_oversubscribed_core_te_balances_the_cores_and_settles(seed):
    """Every NIC to its twin in the other cluster, on a seeded random core:
    each direction's 8 flows share 4 core links of one NIC, so at best every
    flow gets half a NIC. Every core link is full as measured whatever the
    routing (a lone flow fills its own), so only fair shares can say a move
    helps: TE must still even the cores out, then stop."""
    rng = random.Random(seed)
    flows: dict[tuple, tuple[NicId, NicId, str]] = {}
    for nic in THREE_TIER.nics:
        dst = NicId(nic.rail, (nic.pod + 2) % 4, nic.server)
        flows[flow_key(nic, dst, 40000 + len(flows))] = (nic, dst, rng.choice(THREE_TIER.vias(nic, dst)))
    world = World(THREE_TIER, flows)
    state, moves_at = run(world, cycles=50, noise=0.3, seed=seed)
    half_nic = THREE_TIER.spec.rates.nic_gbps * 1e9 / 2
    hashed, _ = world.telemetry(0.0, {})
    settled, _ = world.telemetry(0.0, state.moves)
    assert min(s.rate_bps for s in settled.values()) == pytest.approx(half_nic)
    assert sum(s.rate_bps for s in settled.values()) >= sum(s.rate_bps for s in hashed.values()) * (1 - 1e-9)
    assert [t for t in moves_at if t >= 2.0] == [], "moves after the first 2 s of steady traffic"


def test_a_known_elephant_stays_one_until_it_falls_below_half_the_threshold():
    # Behind a 7:1 core a flow's fair share is 1/7 of a NIC, at the 10%
    # threshold: a noisy sample below it must not drop a known elephant.
    src, dst = NicId(0, 0, 0), NicId(0, 1, 0)
    key = flow_key(src, dst, 42000)
    uplink = FABRIC.egress_path(src, dst, "rys0")[1]
    nic = FABRIC.spec.rates.nic_gbps * 1e9

    def found(rate, recent):
        return elephants_in(FABRIC, {key: FlowSample(rate, 0, 100.0, uplink)}, recent).keys

    def seen_at(rate):
        catalog = engine(FABRIC).catalog
        return Recent(
            [key],
            np.array([rate]),
            np.array([nic]),
            np.array([99.8]),
            np.array([-1]),
            catalog.rows([key]),
            catalog.owner,
        )

    assert found(0.08 * nic, Recent()) == []  # new, under the threshold: a mouse
    assert found(0.08 * nic, seen_at(0.12 * nic)) == [key]  # smoothed to 0.10 of the NIC: still one
    assert found(0.0 * nic, seen_at(0.08 * nic)) == []  # 0.04: gone


def _run(engines, worlds, cycles=12):
    """Steps each (engine, world) pair in turn, cycle by cycle: their
    decisions, per world."""
    states = [TeState() for _ in worlds]
    seen: list[list] = [[] for _ in worlds]
    for c in range(cycles):
        now = 100.0 + 0.2 * c
        for k, (eng, world) in enumerate(zip(engines, worlds)):
            flows, ports = world.telemetry(now, states[k].moves)
            states[k], decisions = eng.step(states[k], Snapshot(flows, ports, now))
            seen[k].append([(d.kind, d.subject, d.to_via) for d in decisions])
    return seen


def test_two_engines_on_one_fabric_in_one_process_decide_as_each_alone():
    """An engine's caches are its own (Engine owns its LinkIndex and
    FlowCatalog): two engines on the same Fabric object, stepped in turn on
    different traffic, decide exactly what each decides alone."""
    first = collided_world()
    a, b, c, d = NicId(1, 0, 0), NicId(1, 0, 1), NicId(1, 1, 0), NicId(1, 1, 1)
    other = {flow_key(a, c, 50001): (a, c, "rys1"), flow_key(b, d, 50002): (b, d, "rys1")}
    other |= {flow_key(c, a, 50003): (c, a, "rys0")}
    second = World(FABRIC, other)
    alone = [_run([Engine(FABRIC)], [w])[0] for w in (first, second)]
    together = _run([Engine(FABRIC), Engine(FABRIC)], [first, second])
    assert together == alone
    assert all(any(any(cycle) for cycle in decided) for decided in alone)  # each engine had something to decide


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_engines_fair_rates_are_the_exact_max_min_rates_with_a_true_bottleneck_for_each(data):
    """fill_paths freezes every bottleneck of a round at once: it must end
    where one-level-at-a-time progressive filling does (emulation.model.fair),
    and the link it names must be full with no flow on it faster."""
    links = data.draw(st.integers(2, 12))
    real = data.draw(st.lists(st.sampled_from([0.0, 1.0, 1.5, 2.0, 10.0]), min_size=links, max_size=links))
    capacity = np.array([*real, math.inf])  # the last: the pad
    width = data.draw(st.integers(1, 4))
    rows = data.draw(
        st.lists(st.lists(st.integers(0, links - 1), max_size=width, unique=True), min_size=1, max_size=14)
    )
    hops = np.array([row + [links] * (width - len(row)) for row in rows])
    cap = np.array(
        data.draw(st.lists(st.sampled_from([math.inf, 0.0, 0.5, 3.0]), min_size=len(rows), max_size=len(rows)))
    )

    rate, bottleneck = fill_paths(hops, capacity, cap)

    exact = max_min_rates(dict(enumerate(capacity)), rows, cap.tolist())
    assert rate == pytest.approx(exact, rel=1e-7, abs=1e-12)
    load = np.bincount(hops.ravel(), np.repeat(np.where(np.isfinite(rate), rate, 0.0), width), len(capacity))
    for i, link in enumerate(bottleneck.tolist()):
        if link < 0:  # its cap, or nothing, holds it
            assert rate[i] == pytest.approx(cap[i]) or (math.isinf(rate[i]) and math.isinf(cap[i]))
            continue
        assert link in rows[i]
        assert load[link] == pytest.approx(capacity[link], rel=1e-7, abs=1e-12)
        on_it = [j for j, row in enumerate(rows) if link in row]
        assert rate[i] == pytest.approx(max(rate[j] for j in on_it), rel=1e-7, abs=1e-12)


def test_the_queue_pairs_of_a_connection_are_elephants_together_though_each_is_a_mouse():
    """Hedera's threshold is a connection's: 16 QPs of one NIC pair at a
    sixteenth of a NIC each are 6% apiece, and two such connections hashed
    onto one uplink collide. TE must see them and part them. Alone, or
    among more flows of one pair than a connection has QPs, a flow at that
    rate stays a mouse."""
    a, b = NicId(0, 0, 0), NicId(0, 0, 1)
    c, d = NicId(0, 1, 0), NicId(0, 1, 1)
    qps = {flow_key(a, c, 40000 + q): (a, c, "rys0") for q in range(16)}
    qps |= {flow_key(b, d, 41000 + q): (b, d, "rys0") for q in range(16)}
    world = World(FABRIC, qps)
    flows, _ = world.telemetry(100.0, {})
    nic = FABRIC.spec.rates.nic_gbps * 1e9
    assert max(s.rate_bps for s in flows.values()) < 0.1 * nic  # every QP alone is under the threshold

    state, _ = run(world, 6, noise=0.0, seed=0)

    assert state.collisions == frozenset()
    vias = Counter(state.moves[k].via if k in state.moves else via for k, (_, _, via) in qps.items())
    assert vias == {"rys0": 16, "rys1": 16}
    uplink = FABRIC.egress_path(a, c, "rys0")[1]
    one = {flow_key(a, c, 43000): FlowSample(0.06 * nic, 0, 100.0, uplink)}
    many = {flow_key(a, c, 43000 + q): FlowSample(0.06 * nic, 0, 100.0, uplink) for q in range(17)}
    assert elephants_in(FABRIC, one).keys == []
    assert elephants_in(FABRIC, many).keys == []


def test_an_engine_whose_caches_start_over_every_cycle_decides_as_one_that_never_does(monkeypatch):
    """A restart keeps the live view's routes, copied into a new route
    table (LinkIndex.carrying): every row number changes, and nothing a
    decision depends on may."""
    import controller.te.engine.cycle as cycle

    collided = {
        flow_key(NicId(r, 0, s), NicId(r, 1, s), 40000 + 10 * r + s): (NicId(r, 0, s), NicId(r, 1, s), "rys0")
        for r in range(2)
        for s in range(2)
    }
    # One flow per leaf pair first (the caches start over with its routes),
    # then the collisions, on the routes carried over.
    quiet = World(NARROW, {k: v for k, v in collided.items() if k[3] % 10 == 0})
    world = World(NARROW, collided)

    def decided(restart_every_cycle: bool) -> tuple[list, dict]:
        monkeypatch.setattr(cycle, "MIN_CACHE", 0 if restart_every_cycle else 1 << 30)
        monkeypatch.setattr(cycle, "CACHE_SLACK", 0 if restart_every_cycle else 1 << 30)
        eng, state, seen = Engine(NARROW), TeState(), []
        for c in range(10):
            now = 100.0 + 0.2 * c
            flows, ports = (quiet if c < 3 else world).telemetry(now, state.moves)
            state, decisions = eng.step(state, Snapshot(flows, ports, now))
            seen.append([(d.kind, d.subject, d.to_via) for d in decisions])
        assert (eng.caches.restarts > 0) == restart_every_cycle
        return seen, {k: m.via for k, m in state.moves.items()}

    restarting = decided(True)
    assert restarting == decided(False)
    assert restarting[1]  # it had collisions to fix


def test_a_cycle_steps_aside_between_the_searches_of_its_joint_plans():
    """A joint search is a cycle's longest stage (tens of milliseconds at
    16K GPUs, a 34 ms wait for the interpreter in a soak): the engine's
    `pause` (the daemon's API goes first) is called between two searches,
    not only between stages, and a world that needs a plan still gets one."""
    import traceback

    rng = random.Random(1)
    for _ in range(200):
        world = random_world(rng, 3)
        eng, state, now = Engine(world.fabric), TeState(), 100.0
        inside: list[bool] = []

        def pause(inside: list[bool] = inside) -> None:
            inside.append(any(f.name in ("joint_plans", "_long_plan") for f in traceback.extract_stack()))

        eng.pause = pause
        planned = False
        for _ in range(10):
            flows, ports = world.telemetry(now, state.moves)
            state, decisions = eng.step(state, Snapshot(flows, ports, now))
            planned |= any("a plan of" in d.reason for d in decisions)
            now += 0.2
        if planned:
            assert any(inside)
            return
    pytest.fail("no world of 200 needed a joint plan")
