"""The flow-level simulator judged by goodput: the ECMP hash, the closed
loop with the real engine on the demo fabric, TCP's ACKs, the flow-mod
count, the fabric's events, the shipped scenarios. (Judged by time:
test_simulate_iterations.py.) Where a routing is held to the exact optimum,
its flows move delivered bytes alone (`framed=False`), as the optimum
counts them; what framing costs is test_framing.py's."""

from __future__ import annotations

import json
import random
import threading
import time

import numpy as np
import pytest

from controller.fabric import NicId, build_fabric, load_fabric, parse_spec
from controller.fabric import addressing as ad
from controller.intent.model import Intent
from controller.te.engine import Move, exact
from emulation.model.pairs import permutation_pairs
from emulation.model.sharing import Sharing
from emulation.simulate.acks import ack_routes, ack_steering
from emulation.simulate.conditions import conditions
from emulation.simulate.flowmods import FlowModCounter
from emulation.simulate.goodput import per_change_max
from emulation.simulate.records import SimulationReport
from emulation.simulate.routes import Network, build_routes, ecmp_routes, flow_hash
from emulation.simulate.run import simulate
from emulation.simulate.traffic import build_arms
from emulation.workload import WorkloadError, available, load_workload, parse_workload
from emulation.workload.events import check_events

DEMO = load_fabric()  # 2 pods x 2 servers x 2 rails, 2 shared spines, 400G everywhere
MID = build_fabric(
    parse_spec(
        "name: mid\nkind: rail-optimized\npods: 4\nservers_per_pod: 4\nrails: 2\nspines: 4\n"
        "plane_mode: per-rail\nrates: {nic_gbps: 400, emulated_nic_mbps: 10}\n"
    )
)
PERMUTATION = """
name: elephant
duration_s: 3
traffic: [{pattern: permutation, protocol: tcp}]
telemetry: {interval_s: 0.2, noise: 0.3, latency_s: 0.05}
"""


def only_arm(fabric, text, seed):
    _, arms = build_arms(fabric, parse_workload(text), seed)
    (arm,) = arms.values()
    return arm


def hashed(fabric, seed):
    baseline = only_arm(fabric, PERMUTATION, seed)
    routes = build_routes(Network(fabric), [(f.src, f.dst) for f in baseline.flows])
    chosen = ecmp_routes(routes, flow_hash([f.key for f in baseline.flows]))
    return routes, [routes.via[r] for r in chosen]


def test_the_ecmp_hash_is_deterministic_per_seed_and_differs_between_seeds():
    _, first = hashed(MID, 1)
    assert hashed(MID, 1)[1] == first
    assert any(hashed(MID, seed)[1] != first for seed in (2, 3, 4))
    # Each flow lands on one of its own equal-cost vias.
    _, vias = hashed(MID, 1)
    pairs = permutation_pairs(MID)
    assert all(via in MID.vias(src, dst) for via, (src, dst) in zip(vias, pairs))
    assert len(set(vias)) > 1


def test_a_dead_uplink_moves_only_the_flows_hashed_onto_it():
    routes, _ = hashed(MID, 5)
    hashes = flow_hash([f.key for f in only_arm(MID, PERMUTATION, 5).flows])
    before = ecmp_routes(routes, hashes)
    network = routes.network
    first = routes.hops[before, 0]
    dead_egress = int(np.bincount(first[first >= 0]).argmax())  # the busiest uplink
    capacity = network.capacity_without([network.link_names[dead_egress]])
    after = ecmp_routes(routes, hashes, routes.ingress_usable(capacity))
    on_dead = routes.hops[before, 0] == dead_egress
    assert on_dead.any()
    assert np.all(after[~on_dead] == before[~on_dead])  # rendezvous: nobody else moves
    assert not np.any(routes.hops[after, 0] == dead_egress)


def test_spraying_splits_every_flow_evenly_over_its_paths():
    routes, _ = hashed(MID, 1)
    shares = routes.spray_shares().toarray()
    uplinks = routes.network.is_uplink
    # 4 spines per plane: a quarter of each flow on each uplink of its leaf.
    assert set(np.round(shares[:, uplinks][shares[:, uplinks] > 0], 9)) == {0.25}


def _final(result: SimulationReport) -> float:
    assert result.te.goal is not None  # judged by goodput
    return result.te.goal.fraction_of_optimum_final


def test_the_closed_loop_on_the_demo_fabric_fixes_the_ecmp_collision():
    # Seed 3 hashes two elephants of one leaf onto one uplink (as on the emulated demo).
    result = simulate(DEMO, parse_workload(PERMUTATION), seed=3, framed=False)
    phase = result.goodput_phases[0]
    assert phase.optimum.aggregate_bps == pytest.approx(8 * 400e9)
    assert phase.ecmp.collided_uplinks >= 1
    assert phase.ecmp.fraction_of_optimum < 0.9
    assert phase.spray.fraction_of_optimum == pytest.approx(1.0)
    goal, loop = result.te.goal, result.te.loop
    assert goal is not None
    assert goal.fraction_of_optimum_first == pytest.approx(phase.ecmp.fraction_of_optimum)
    assert goal.fraction_of_optimum_final == pytest.approx(1.0)
    assert goal.cycles_to_target_and_holds is not None and goal.cycles_to_target_and_holds <= 3
    assert loop.collided_uplinks_final == 0
    assert loop.reroutes_total >= 1 and loop.flow_mods_total >= 2  # a move: its data and ACK entries
    assert loop.path_changes_per_flow_max <= 2
    written = result.as_json()
    assert json.loads(json.dumps(written)) == written  # JSON-ready as it is
    # The report's JSON keeps the shape the simulator has always written: TE's target and loop figures in one object.
    assert written["te"]["fraction_of_optimum_final"] == goal.fraction_of_optimum_final
    assert written["te"]["engine_step_s"]["p99"] == loop.engine_step_s.p99
    assert written["te_optimum"][0] == {"start_s": 0, **written["phases"][0]["optimum"]}
    assert "fraction_of_optimum" in written["cycles"][0] and "arms" not in written


def test_a_fraction_of_the_optimum_never_exceeds_it_where_an_unfair_routing_carries_more(monkeypatch):
    # Hedera's randx3 (three flows per host), seed 6: TE's single-path routing has
    # max-min rates adding up to more than the splittable max-min optimum's
    # aggregate (max-min fairness does not maximise the sum). Each flow is
    # credited up to its own optimum rate, so the fraction stays a true bound.
    # A generous time limit for the exact search keeps the routing (and this
    # test) the same on a busy machine.
    monkeypatch.setattr(exact, "TIME_LIMIT_S", 5.0)
    result = simulate(load_fabric("fat-tree-k4.yaml"), load_workload("hedera/randx3"), seed=6, duration_s=3)
    optimum = (result.te_optimum or [])[0].optimum.aggregate_bps
    assert max(c.aggregate_bps for c in result.cycles) > optimum * 1.001
    assert max(c.fraction_of_optimum or 0.0 for c in result.cycles) <= 1.0 + 1e-9
    assert all(max(p.ecmp.fraction_of_optimum, p.spray.fraction_of_optimum) <= 1 + 1e-9 for p in result.goodput_phases)


def test_te_clears_links_crowded_by_small_flows_whose_moves_each_gain_under_a_twentieth_of_a_link(monkeypatch):
    # Hedera's randx5: five flows per host, each a fifth of its NIC, so a
    # move frees at most a fifth of a link. When a plan's gain in the sum of
    # the rates had to pay twice min_gain of the link per move, no plan among
    # them ever paid its way, and TE stopped at 96.7 % of the optimum on this
    # seed; paying twice min_gain of what each moved flow sends, the routing
    # gets within 1 % of it. (The exact search runs to its time limit here: a
    # generous one keeps the routing the same on a busy machine.) The routing
    # is judged by max-min sharing, the optimum's own: with five TCP flows per
    # NIC, proportional sharing costs every routing some credit at the NICs.
    monkeypatch.setattr(exact, "TIME_LIMIT_S", 5.0)
    fabric, workload = load_fabric("fat-tree-k4.yaml"), load_workload("hedera/randx5")
    result = simulate(fabric, workload, seed=2, duration_s=4, sharing=Sharing.MAX_MIN, framed=False)
    assert _final(result) >= 0.99
    assert result.te.loop.path_changes_per_flow_max <= 2


def test_a_seed_that_does_not_collide_leaves_te_nothing_to_do():
    quiet = [
        s
        for s in range(1, 12)
        if simulate(DEMO, parse_workload(PERMUTATION), s).goodput_phases[0].ecmp.collided_uplinks == 0
    ]
    assert quiet
    result = simulate(DEMO, parse_workload(PERMUTATION), quiet[0], framed=False)
    assert result.te.loop.reroutes_total == 0
    assert _final(result) == pytest.approx(1.0)


def test_a_link_failure_black_holes_remote_flows_until_te_moves_them():
    workload = parse_workload(
        PERMUTATION.replace("duration_s: 3", "duration_s: 4") + "events:\n  - {at_s: 2, link_down: 'ryl0r0:3'}\n"
    )
    result = simulate(DEMO, workload, seed=1, framed=False)
    _, after = result.goodput_phases
    assert after.dead_links == ["ryl0r0:3"]
    # Without the link each of ryl0r0's directions has one uplink for two flows.
    assert after.optimum.aggregate_bps == pytest.approx(4 * 400e9 + 4 * 200e9)
    assert _final(result) == pytest.approx(1.0)


def test_a_tcp_flow_stalls_when_its_acks_cross_a_dead_link_whatever_carries_its_data():
    # 10.0.1.1 -> 10.0.0.1 on rail 0: its ACKs run from pod 0 back up, so
    # with ryl0r0's uplink to rys0 down they die if they leave by rys0.
    a, b = NicId(0, 1, 0), NicId(0, 0, 0)
    key = (ad.nic_ip(a), ad.nic_ip(b), "tcp", 40000, 5201)
    network = Network(DEMO)
    acks = ack_routes(network, [key], [(a, b)])
    dead = network.capacity_without(["ryl0r0:3"])
    assert acks.stalled(dead, ["rys0"]).tolist() == [True]
    assert acks.stalled(dead, ["rys1"]).tolist() == [False]
    assert acks.stalled(network.capacity, ["rys0"]).tolist() == [False]  # nothing dead
    udp = ack_routes(network, [(*key[:2], "udp", *key[3:])], [(a, b)])
    assert udp.stalled(dead, ["rys0"]).tolist() == [False]  # no ACKs to lose
    # Hashed, the ACKs leave ryl0r0 by its live uplink only: the leaf skips the dead bucket.
    assert acks.stalled(dead, [""]).tolist() == [False]


def test_acks_follow_the_reverse_flows_move_then_the_flows_own_then_a_job_pair():
    a, b = NicId(0, 0, 0), NicId(0, 1, 0)
    forward = (ad.nic_ip(a), ad.nic_ip(b), "tcp", 40000, 5201)
    backward = (ad.nic_ip(b), ad.nic_ip(a), "tcp", 5201, 40000)  # the ACKs' own 5-tuple, also a flow
    acks = ack_routes(Network(DEMO), [forward, backward], [(a, b), (b, a)])
    assert acks.reverse_flow.tolist() == [1, 0]
    assert ack_steering(["", ""], [(a, b), (b, a)], {0: "rys0", 1: "rys1"}, acks) == ["rys1", "rys0"]
    assert ack_steering(["", ""], [(a, b), (b, a)], {0: "rys0"}, acks) == ["rys0", "rys0"]
    assert ack_steering(["rys1", "rys0"], [(a, b), (b, a)], {}, acks) == ["rys0", "rys1"]


def test_a_job_mix_places_through_both_rules():
    workload = parse_workload(
        """
name: mix
duration_s: 1
traffic: [{jobs: 0.9, sizes: {4: 1, 8: 1, 16: 1}, collectives: {ring: 1, all-to-all: 1}}]
"""
    )
    result = simulate(MID, workload, seed=2)
    placement = result.placement
    assert all(placement[p].fill >= 0.9 for p in ("first-fit", "topology", "railyard"))
    assert placement["railyard"].jobs >= 2
    assert 0.0 < _final(result) <= 1.0 + 1e-9
    assert 0.0 < result.goodput_phases[0].ecmp.fraction_of_optimum <= 1.0 + 1e-9


def _moves(fabric, rng, keys, pairs):
    out = {}
    for key, (src, dst) in zip(keys, pairs):
        vias = fabric.vias(src, dst)
        if vias and rng.random() < 0.5:
            out[key] = Move(key, src, dst, rng.choice(vias), 0.0, 0.0)
    return out


def test_flow_mods_counted_by_groups_equal_a_full_render_and_diff():
    arm = only_arm(MID, PERMUTATION, 1)
    pairs = [(f.src, f.dst) for f in arm.flows]
    keys = [f.key for f in arm.flows]
    # Reverse flows too, so some moves render together with their reverse's.
    keys += [(d, s, p, dp, sp) for s, d, p, sp, dp in keys[:8]]
    pairs += [(d, s) for s, d in pairs[:8]]
    incremental, full = FlowModCounter(MID, Intent()), FlowModCounter(MID, Intent())
    rng = random.Random(4)
    for _ in range(12):
        moves = _moves(MID, rng, keys, pairs)
        assert incremental.update(moves, {})[0] == full._full(moves, {})[0]
        assert incremental.tables == full.tables


def test_shipped_scenarios_fault_against_the_fabric_with_the_field_named():
    for text, field in [
        ("traffic: [{pattern: permutation}]\nevents: [{at_s: 1, link_down: 'ryl0r0:1'}]\n", "events[0].link_down"),
        ("traffic: [{pattern: incast, fan_in: 9}]\n", "traffic[0].fan_in"),
        ("traffic: [{jobs: 0.5, sizes: [12]}]\n", "traffic[0].sizes.12"),
    ]:
        with pytest.raises(WorkloadError) as info:
            build_arms(DEMO, parse_workload(text), 1)
        assert info.value.field == field


def test_every_shipped_scenario_loads():
    names = available()
    assert {"elephant", "job-mix-large", "job-mix-32k", "training-mix-32k"} <= set(names)
    for name in names:
        assert load_workload(name).name == name


# --- finite transfers, iterations, events, the arms -----------------------------------


def test_conditions_follow_link_and_switch_events_and_drains():
    workload = check_events(
        parse_workload(
            """
traffic: [{pattern: permutation}]
duration_s: 6
events:
  - {at_s: 1, link_down: 'ryl0r0:3'}
  - {at_s: 2, link_up: 'ryl0r0:3'}
  - {at_s: 3, switch_down: rys1}
  - {at_s: 4, switch_up: rys1}
  - {at_s: 4.5, drain: rys0}
  - {at_s: 5, undrain: rys0}
"""
        ),
        DEMO,
    )
    found = conditions(DEMO, workload.events)
    assert [c.start_s for c in found] == [0, 1, 2, 3, 4, 4.5, 5]
    assert [len(c.dead) for c in found] == [0, 1, 0, 4, 0, 0, 0]
    assert found[1].dead == ("ryl0r0:3",) and all(name.startswith("rys1:") for name in found[3].dead)
    assert found[5].drains.switches == {"rys0"} and not found[5].dead and not found[6].drains.switches


def test_a_dead_spine_halves_the_optimum_and_te_keeps_to_it():
    text = PERMUTATION + "events:\n  - {at_s: 1, switch_down: rys0}\n  - {at_s: 2, switch_up: rys0}\n"
    result = simulate(DEMO, parse_workload(text), seed=2, framed=False)
    assert [p.optimum.aggregate_bps for p in result.goodput_phases] == pytest.approx([3.2e12, 1.6e12, 3.2e12])
    during = [c for c in result.cycles if 1.2 <= c.t < 2.0]
    assert all(c.fraction_of_optimum == pytest.approx(1.0) for c in during)


def test_a_drain_moves_te_off_the_spine_while_the_baselines_ignore_it():
    text = PERMUTATION + "events:\n  - {at_s: 1, drain: rys0}\n  - {at_s: 2.6, undrain: rys0}\n"
    result = simulate(DEMO, parse_workload(text), seed=2, framed=False)
    (phase,) = result.goodput_phases  # a drain is no lost capacity: ECMP and spraying are as before
    assert phase.ecmp.fraction_of_optimum == pytest.approx(1.0)
    cycles = {round(c.t, 1): c for c in result.cycles}
    assert cycles[1.0].reroutes == 8  # every flow off rys0 at once
    assert cycles[2.0].fraction_of_optimum == pytest.approx(0.5)  # two flows per rys1 uplink, as drained


def test_path_changes_are_counted_between_two_changes_of_traffic():
    # Flow 3 moves at 0.2 s, then twice after the failure at 8 s: 2 in a change, 3 over the run.
    changed_at = [(0.2, np.array([3, 4])), (8.2, np.array([3])), (8.6, np.array([3, 5]))]
    assert per_change_max(changed_at, [0.0, 8.0, 14.0]) == 2
    assert per_change_max(changed_at, [0.0, 8.0, 8.4]) == 1
    assert per_change_max([], [0.0]) == 0


def test_a_steps_cpu_time_is_the_engines_own_thread_not_the_process(monkeypatch):
    # OpenBLAS's helper threads spin for ~0.1 s after each of the fluid
    # model's solves; counted as the process's CPU, that spin was billed to
    # meta-32k's costliest steps. Work on another thread during the step is
    # in its wall time, not in its CPU time.
    from controller.te.engine import Engine

    step = Engine.step

    def step_beside_a_busy_thread(self, state, snapshot):
        def spin():
            until = time.thread_time() + 0.1
            while time.thread_time() < until:
                pass

        busy = threading.Thread(target=spin)
        busy.start()
        busy.join()
        return step(self, state, snapshot)

    monkeypatch.setattr(Engine, "step", step_beside_a_busy_thread)
    loop = simulate(DEMO, parse_workload(PERMUTATION), seed=3, duration_s=1).te.loop
    assert loop.engine_step_s.p50 >= 0.1
    assert loop.engine_step_cpu_s.max < 0.05
