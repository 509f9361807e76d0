"""The TE engine with synthetic telemetry: no switch, no clock."""

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.fabric import Endpoint, NicId, build_fabric, load_fabric, parse_spec
from controller.fabric import addressing as ad
from controller.te.demand import nic_limited
from controller.te.engine import Engine, EngineConfig, PathChanges, Snapshot, TeState
from controller.te.jobs import Drains
from controller.te.view import FlowKey, FlowSample, PortSample

_ENGINES: dict[tuple[int, EngineConfig], Engine] = {}


def engine(fabric, cfg=EngineConfig()) -> Engine:
    """One engine per fabric and configuration, as a TE runner owns one."""
    key = (id(fabric), cfg)
    if key not in _ENGINES or _ENGINES[key].fabric is not fabric:
        _ENGINES[key] = Engine(fabric, cfg)
    return _ENGINES[key]


def step(fabric, state, flows, ports, now, cfg=EngineConfig(), drains=Drains(), steered=frozenset(), jobs=frozenset()):
    """One cycle of the fabric's engine."""
    return engine(fabric, cfg).step(state, Snapshot(flows, ports, now, drains, steered, jobs))


FABRIC = load_fabric()  # 2 pods x 2 servers x 2 rails, spines rys0/rys1; uplinks 400G (= NIC)
G = 1e9
UPLINK = {"rys0": 3, "rys1": 4}


def flow_key(src: NicId, dst: NicId, sport: int):
    return (ad.nic_ip(src), ad.nic_ip(dst), "tcp", sport, 5201)


class World:
    """A fluid model of the fabric: what telemetry would report for given flows and paths."""

    def __init__(self, fabric, flows):
        self.fabric = fabric
        self.flows = flows  # key -> (src, dst, via)

    def telemetry(
        self, now, moves, noise=0.0, rng=None
    ) -> tuple[dict[FlowKey, FlowSample], dict[Endpoint, PortSample]]:
        paths = {k: (s, d, moves[k].via if k in moves else via) for k, (s, d, via) in self.flows.items()}
        load: dict[Endpoint, list[tuple[NicId, NicId]]] = {}
        for s, d, via in paths.values():
            for e in self.fabric.egress_path(s, d, via or None):
                load.setdefault(e, []).append((s, d))
        # Each flow gets the smallest fair share along its path (good enough for TCP elephants).
        rates = {}
        for k, (s, d, via) in paths.items():
            share = min(self.fabric.capacity_bps[e] / len(load[e]) for e in self.fabric.egress_path(s, d, via or None))
            jitter = 1 + (rng.uniform(-noise, noise) if rng else 0.0)
            rates[k] = share * jitter
        flows = {k: self.sample(rates[k], now, s, d, via) for k, (s, d, via) in paths.items()}
        ports = {}
        for e, _users in load.items():
            tx = sum(rates[k] for k, (s, d, v) in paths.items() if e in self.fabric.egress_path(s, d, v or None))
            ports[e] = PortSample(tx, 0, 0, now)
        return flows, ports

    def sample(self, rate, now, src, dst, via) -> FlowSample:
        """As the agent reports it: the ingress leaf's uplink and, on a path
        that hashes twice (across a three-tier core, a fat tree's core), the
        second switch's uplink."""
        hops = self.fabric.egress_path(src, dst, via or None)[1:-1]
        return FlowSample(rate, 0, now, hops[0] if hops else None, hops[1] if len(hops) > 2 else None)


def collided_world():
    a, b = NicId(0, 0, 0), NicId(0, 0, 1)
    c, d = NicId(0, 1, 0), NicId(0, 1, 1)
    return World(FABRIC, {flow_key(a, c, 40001): (a, c, "rys0"), flow_key(b, d, 40002): (b, d, "rys0")})


def run(world, cycles, cfg=EngineConfig(), noise=0.0, seed=0, dt=0.2):
    rng = random.Random(seed)
    state, log = TeState(), []
    for i in range(cycles):
        now = 100.0 + i * dt
        flows, ports = world.telemetry(now, state.moves, noise, rng)
        state, decisions = step(FABRIC if world.fabric is FABRIC else world.fabric, state, flows, ports, now, cfg)
        log += decisions
    return state, log


def test_a_collision_is_found_and_resolved_in_one_cycle():
    world = collided_world()
    flows, ports = world.telemetry(100.0, {})
    assert all(s.rate_bps == 200 * G for s in flows.values())  # two elephants halve one uplink
    state, decisions = step(FABRIC, TeState(), flows, ports, 100.0)
    kinds: list[str] = [d.kind for d in decisions]
    assert kinds.count("collision") == 1 and decisions[0].subject == f"ryl0r0:{UPLINK['rys0']}"
    assert kinds.count("reroute") == 1
    (moved,) = state.moves.values()
    assert moved.via == "rys1"
    flows, ports = world.telemetry(100.2, state.moves)
    assert all(s.rate_bps == 400 * G for s in flows.values())
    state2, decisions = step(FABRIC, state, flows, ports, 100.2)
    assert (
        not [d for d in decisions if d.kind in ("collision", "reroute")] and state2.moves.keys() == state.moves.keys()
    )


def test_a_flow_changes_path_at_most_twice_while_it_stays_an_elephant_whatever_other_elephants_do():
    world = collided_world()
    flows, ports = world.telemetry(100.0, {})
    state, _ = step(FABRIC, TeState(), flows, ports, 100.0)
    assert len(state.moves) == 1
    # Both flows back on one uplink, each having changed path twice already.
    spent = replace(state, moves={}, changes=dict.fromkeys(world.flows, PathChanges(2, 100.0)))
    # An elephant on another rail appears: the set of elephants changes, not these two's budget.
    c, d = NicId(1, 0, 0), NicId(1, 1, 0)
    world.flows[flow_key(c, d, 40003)] = (c, d, "rys0")
    flows, ports = world.telemetry(110.0, {})
    after, decisions = step(FABRIC, spent, flows, ports, 110.0)
    assert after.moves == {} and "reroute" not in [d.kind for d in decisions]
    assert counts(after) == dict.fromkeys(list(world.flows)[:2], 2)
    # A link going down, even one none of them crosses, starts every count over: the two may move again.
    flows, ports = world.telemetry(110.2, {})
    ports[Endpoint("ryl1r1", UPLINK["rys1"])] = PortSample(0.0, 0, 0, 110.2, up=False)
    again, _ = step(FABRIC, after, flows, ports, 110.2)
    assert again.down == {f"ryl1r1:{UPLINK['rys1']}"}
    moved = [key for key, move in again.moves.items() if not move.rescued]  # not the new flow's ACK pin
    assert len(moved) == 1 and moved[0] in list(world.flows)[:2] and counts(again) == {moved[0]: 1}


def counts(state: TeState) -> dict[FlowKey, int]:
    return {key: changes.count for key, changes in state.changes.items()}


def test_a_flow_that_goes_quiet_and_comes_back_keeps_its_spent_budget_until_it_is_forgotten():
    world = collided_world()
    spent = TeState(changes=dict.fromkeys(world.flows, PathChanges(2, 100.0)))
    # No record of either for longer than expire_after_s: TCP sharing a NIC
    # four ways dips under the elephant threshold for seconds, then returns.
    quiet, _ = step(FABRIC, spent, {}, {}, 104.0)
    assert counts(quiet) == dict.fromkeys(world.flows, 2)
    flows, ports = world.telemetry(104.2, {})
    back, decisions = step(FABRIC, quiet, flows, ports, 104.2)
    assert back.moves == {} and "reroute" not in [d.kind for d in decisions]
    assert counts(back) == dict.fromkeys(world.flows, 2)
    # Unseen for forget_changes_after_s they are forgotten (the memory is
    # bounded), and collided again they are new flows, free to move.
    later = 104.2 + EngineConfig().forget_changes_after_s + 0.2
    gone, _ = step(FABRIC, back, {}, {}, later)
    assert gone.changes == {}
    flows, ports = world.telemetry(later + 0.2, {})
    fresh, decisions = step(FABRIC, gone, flows, ports, later + 0.2)
    assert [d.kind for d in decisions].count("reroute") == 1 and counts(fresh) == dict.fromkeys(fresh.moves, 1)


def test_noisy_telemetry_does_not_make_flows_flap():
    state, log = run(collided_world(), cycles=150, noise=0.3, seed=7)
    reroutes = [d for d in log if d.kind == "reroute"]
    assert len(reroutes) == 1, [d.reason for d in reroutes]
    assert len(state.moves) == 1


def test_stale_telemetry_is_never_acted_on():
    world = collided_world()
    flows, ports = world.telemetry(100.0, {})
    state, decisions = step(FABRIC, TeState(), flows, ports, now=100.0 + 5.0)
    assert decisions == [] and state.moves == {}


def test_moves_expire_when_the_flow_goes_quiet():
    world = collided_world()
    state, _ = run(world, cycles=2)
    assert state.moves
    state, decisions = step(FABRIC, state, {}, {}, now=200.0)
    assert state.moves == {} and [d.kind for d in decisions] == ["expire"]


def test_incast_is_recognized_and_senders_get_the_fair_share():
    world, dst = incast_world()
    state, decisions = step(FABRIC, TeState(), *offered(world, 100.0), 100.0)
    (incast,) = [d for d in decisions if d.kind == "incast"]
    assert incast.subject == ad.nic_ip(dst) and "3 senders" in incast.reason
    assert state.incasts == {ad.nic_ip(dst)}
    # A repeated observation is the same incast, not a new event.
    _, again = step(FABRIC, state, *offered(world, 100.2), 100.2)
    assert not [d for d in again if d.kind == "incast"]


def test_tcp_flows_sharing_a_receiver_are_no_incast():
    """Three TCP elephants into one NIC, each at its third (Hedera's rand0
    has such receivers): they offer what the NIC delivers, no more, and a
    meter could only take from them."""
    dst = NicId(0, 1, 0)
    senders = [NicId(0, 0, 0), NicId(0, 0, 1), NicId(0, 1, 1)]
    world = World(
        FABRIC,
        {flow_key(s, dst, 41000 + i): (s, dst, "rys0" if s.pod != dst.pod else "") for i, s in enumerate(senders)},
    )
    rng = random.Random(1)
    state = TeState()
    for i in range(50):
        flows, ports = world.telemetry(100.0 + 0.2 * i, state.moves, noise=0.3, rng=rng)
        state, decisions = step(FABRIC, state, flows, ports, 100.0 + 0.2 * i)
        assert state.meters == {} and "incast" not in [d.kind for d in decisions]


def test_demand_estimation_matches_hedera():
    a, b, c = NicId(0, 0, 0), NicId(0, 0, 1), NicId(0, 1, 0)
    d = nic_limited([a, a, b], [c, b, c], 1.0)
    # a splits its NIC between c and b; c's two senders are capped at 1/2 each; b sends 1/2 to c.
    assert [round(x, 3) for x in d] == [0.5, 0.5, 0.5]


FAT = build_fabric(
    parse_spec("pods: 2\nservers_per_pod: 4\nrails: 1\nspines: 4\nrates: {nic_gbps: 100, emulated_nic_mbps: 10}\n")
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=4, unique_by=lambda p: p[0]),
    st.integers(0, 2**16),
)
def test_engine_never_leaves_a_link_over_capacity_when_a_feasible_assignment_exists(pairs, seed):
    # Permutation-like elephants from pod 0 to pod 1 with distinct senders and receivers:
    # 4 spines x 100G uplinks, so one elephant per spine is always feasible.
    pairs = list({dst: (src, dst) for src, dst in pairs}.values())
    rng = random.Random(seed)
    flows = {
        flow_key(NicId(0, 0, s), NicId(0, 1, d), 40000 + s): (
            NicId(0, 0, s),
            NicId(0, 1, d),
            rng.choice(["rys0", "rys1"]),
        )
        for s, d in pairs
    }
    world = World(FAT, flows)
    cfg = EngineConfig(hysteresis_s=0.0)
    state = TeState()
    for i in range(6):
        now = 10.0 + i
        state, _ = step(FAT, state, *world.telemetry(now, state.moves), now, cfg)
    final, ports = world.telemetry(20.0, state.moves)
    for egress, sample in ports.items():
        assert sample.tx_bps <= FAT.capacity_bps[egress] * (1 + 1e-9)
    assert all(s.rate_bps >= 100 * G * 0.999 for s in final.values()), "an elephant is still squeezed"


def test_a_dead_uplink_moves_its_elephants_at_once_even_within_hysteresis_and_lets_go_once_it_is_back():
    a, c = NicId(0, 0, 0), NicId(0, 1, 0)
    key = flow_key(a, c, 40001)
    world = World(FABRIC, {key: (a, c, "rys0")})
    flows, ports = world.telemetry(100.0, {})
    state, _ = step(FABRIC, TeState(), flows, ports, 100.0)
    assert state.moves == {}  # alone on its uplink: nothing to do
    dead = Endpoint("ryl0r0", UPLINK["rys0"])
    ports[dead] = ports[dead].__class__(0.0, 0, 0, 100.1, up=False)
    flows = {k: s.__class__(s.rate_bps, 0, 100.1, s.ingress) for k, s in flows.items()}
    state, decisions = step(FABRIC, state, flows, ports, 100.1, EngineConfig(hysteresis_s=60))
    assert [d.kind for d in decisions] == ["link-down", "reroute"]
    assert state.moves[key].via == "rys1" and state.down == {f"ryl0r0:{UPLINK['rys0']}"}
    # Back up: the flow goes back to its hash, not held on the survivor for good.
    flows, ports = world.telemetry(101.0, state.moves)
    state, decisions = step(FABRIC, state, flows, ports, 101.0, EngineConfig(hysteresis_s=60))
    assert [d.kind for d in decisions] == ["expire"] and "is back" in decisions[0].reason
    assert state.moves == {} and state.down == frozenset()


def test_a_flow_pinned_for_its_acks_while_a_link_is_down_is_let_go_once_it_is_back():
    a, c = NicId(0, 0, 1), NicId(0, 1, 1)
    key = flow_key(a, c, 40002)
    world = World(FABRIC, {key: (a, c, "rys1")})  # its ACKs hash on their own, maybe via rys0 into ryl0r0
    dead = Endpoint("ryl0r0", UPLINK["rys0"])
    flows, ports = world.telemetry(100.0, {})
    ports[dead] = PortSample(0.0, 0, 0, 100.0, up=False)
    state, decisions = step(FABRIC, TeState(), flows, ports, 100.0)
    assert [d.kind for d in decisions] == ["link-down", "reroute"] and "ACKs" in decisions[1].reason
    flows, ports = world.telemetry(100.2, state.moves)
    state, decisions = step(FABRIC, state, flows, ports, 100.2)
    assert [d.kind for d in decisions] == ["expire"] and state.moves == {}


def test_flows_a_pin_or_job_steers_count_as_load_but_are_never_moved():
    world = collided_world()
    flows, ports = world.telemetry(100.0, {})
    pairs = frozenset((s, d) for s, d, _ in world.flows.values())
    state, decisions = step(FABRIC, TeState(), flows, ports, 100.0, steered=pairs)
    # TE may not act on it: reported once, as a collision it cannot fix.
    assert [d.kind for d in decisions] == ["unfixable"] and state.moves == {}
    flows, ports = collided_world().telemetry(100.2, {})
    state, decisions = step(FABRIC, state, flows, ports, 100.2, steered=pairs)
    assert decisions == [] and state.unfixable == {f"ryl0r0:{UPLINK['rys0']}"}


def incast_world():
    """Three senders in pod 0 (two remote on rys0/rys1, one beside the receiver) into one NIC."""
    dst = NicId(0, 1, 0)
    senders = {NicId(0, 0, 0): "rys0", NicId(0, 0, 1): "rys1", NicId(0, 1, 1): ""}
    flows = {
        (ad.nic_ip(s), ad.nic_ip(dst), "udp", 41000 + i, 4791): (s, dst, via)
        for i, (s, via) in enumerate(senders.items())
    }
    return World(FABRIC, flows), dst


def offered(world, now) -> tuple[dict[FlowKey, FlowSample], dict[Endpoint, PortSample]]:
    """UDP senders at line rate: flow records count before any meter, as the datapath does."""
    flows, ports = world.telemetry(now, {})
    return {k: replace(s, rate_bps=400 * G) for k, s in flows.items()}, ports


def test_incast_senders_are_metered_to_the_fair_share_and_pinned_where_they_are():
    world, _dst = incast_world()
    state, decisions = step(FABRIC, TeState(), *offered(world, 100.0), 100.0)
    assert [d.kind for d in decisions if d.kind == "incast"] == ["incast"]
    assert set(state.meters) == set(world.flows)
    assert all(abs(m.rate_bps - 0.95 * 400 * G / 3) < 1 for m in state.meters.values())
    # The two that cross spines carry their meter on a move at their own leaf,
    # pinned to the spine the switch already uses; the local one needs no move.
    remote = {k for k, (s, d, via) in world.flows.items() if via}
    assert remote <= set(state.moves) and all(state.moves[k].via == world.flows[k][2] for k in remote)


def test_meters_hold_steady_under_noise_and_go_when_the_incast_is_over():
    world, dst = incast_world()
    state, _ = step(FABRIC, TeState(), *offered(world, 100.0), 100.0)
    first = dict(state.meters)
    rng = random.Random(3)
    for i in range(1, 30):
        flows, ports = offered(world, 100.0 + 0.2 * i)
        flows = {k: replace(s, rate_bps=s.rate_bps * rng.uniform(0.8, 1.2)) for k, s in flows.items()}
        state, decisions = step(FABRIC, state, flows, ports, 100.0 + 0.2 * i)
        assert not [d for d in decisions if d.kind in ("incast", "expire")]
    assert {k: m.rate_bps for k, m in state.meters.items()} == {k: m.rate_bps for k, m in first.items()}
    # One sender stops: two senders are no incast (fan-in 3), but the meters
    # stay for expire_after_s in case it flickers, then go, with an event.
    quiet = next(iter(world.flows))
    flows, ports = offered(world, 106.2)
    flows.pop(quiet)
    state, _ = step(FABRIC, state, flows, ports, 106.2)
    assert state.meters and state.incasts == frozenset()
    state, decisions = step(FABRIC, state, {}, {}, 110.0)
    assert state.meters == {} and [d.subject for d in decisions if d.kind == "expire"][-1] == ad.nic_ip(dst)
