"""The flow-level simulator: the ECMP hash, workloads, the closed loop with the
real engine on the demo fabric, the flow-mod count, the command."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from controller.cli.main import main
from controller.fabric import NicId, build_fabric, load_fabric, parse_spec
from controller.fabric import addressing as ad
from controller.intent.model import Intent
from controller.te.engine import Move
from emulation.model.pairs import permutation_pairs
from emulation.simulate.flowmods import FlowModCounter
from emulation.simulate.routes import Network, ack_routes, ack_steering, build_routes, ecmp_routes, flow_hash
from emulation.simulate.run import simulate
from emulation.simulate.traffic import build_arms
from emulation.simulate.workload import WorkloadError, load_workload, parse_workload

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
traffic: {pattern: permutation, protocol: tcp}
telemetry: {interval_s: 0.2, noise: 0.3, latency_s: 0.05}
"""


def hashed(fabric, seed):
    baseline, _ = build_arms(fabric, parse_workload(PERMUTATION), seed)
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
    hashes = flow_hash([f.key for f in build_arms(MID, parse_workload(PERMUTATION), 5)[0].flows])
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


def test_the_closed_loop_on_the_demo_fabric_fixes_the_ecmp_collision():
    # Seed 3 hashes two elephants of one leaf onto one uplink (as on the emulated demo).
    result = simulate(DEMO, parse_workload(PERMUTATION), seed=3)
    phase = result["phases"][0]
    assert phase["optimum"]["aggregate_bps"] == pytest.approx(8 * 400e9)
    assert phase["ecmp"]["collided_uplinks"] >= 1
    assert phase["ecmp"]["fraction_of_optimum"] < 0.9
    assert phase["spray"]["fraction_of_optimum"] == pytest.approx(1.0)
    te = result["te"]
    assert te["fraction_of_optimum_first"] == pytest.approx(phase["ecmp"]["fraction_of_optimum"])
    assert te["fraction_of_optimum_final"] == pytest.approx(1.0)
    assert te["cycles_to_target_and_holds"] is not None and te["cycles_to_target_and_holds"] <= 3
    assert te["collided_uplinks_final"] == 0
    assert te["reroutes_total"] >= 1 and te["flow_mods_total"] >= 2  # a move: its data and ACK entries
    assert te["path_changes_per_flow_max"] <= 2
    assert json.loads(json.dumps(result)) == result  # JSON-ready as it is


def test_a_seed_that_does_not_collide_leaves_te_nothing_to_do():
    quiet = [
        s
        for s in range(1, 12)
        if simulate(DEMO, parse_workload(PERMUTATION), s)["phases"][0]["ecmp"]["collided_uplinks"] == 0
    ]
    assert quiet
    result = simulate(DEMO, parse_workload(PERMUTATION), quiet[0])
    assert result["te"]["reroutes_total"] == 0
    assert result["te"]["fraction_of_optimum_final"] == pytest.approx(1.0)


def test_a_link_failure_black_holes_remote_flows_until_te_moves_them():
    workload = parse_workload(
        PERMUTATION.replace("duration_s: 3", "duration_s: 4") + "events:\n  - {at_s: 2, link_down: 'ryl0r0:3'}\n"
    )
    result = simulate(DEMO, workload, seed=1)
    _, after = result["phases"]
    assert after["dead_links"] == ["ryl0r0:3"]
    # Without the link each of ryl0r0's directions has one uplink for two flows.
    assert after["optimum"]["aggregate_bps"] == pytest.approx(4 * 400e9 + 4 * 200e9)
    assert result["te"]["fraction_of_optimum_final"] == pytest.approx(1.0)


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
traffic: {pattern: jobs, fill: 0.9, sizes: {4: 1, 8: 1, 16: 1}, collectives: {ring: 1, all-to-all: 1}}
"""
    )
    result = simulate(MID, workload, seed=2)
    placement = result["placement"]
    assert placement["baseline"]["fill"] >= 0.9 and placement["railyard"]["fill"] >= 0.9
    assert placement["railyard"]["jobs"] >= 2
    assert 0.0 < result["te"]["fraction_of_optimum_final"] <= 1.0 + 1e-9
    assert 0.0 < result["phases"][0]["ecmp"]["fraction_of_optimum"] <= 1.0 + 1e-9


def _moves(fabric, rng, keys, pairs):
    out = {}
    for key, (src, dst) in zip(keys, pairs):
        vias = fabric.vias(src, dst)
        if vias and rng.random() < 0.5:
            out[key] = Move(key, src, dst, rng.choice(vias), 0.0, 0.0)
    return out


def test_flow_mods_counted_by_groups_equal_a_full_render_and_diff():
    arm, _ = build_arms(MID, parse_workload(PERMUTATION), 1)
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


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("[1, 2]", "<document>"),
        ("name: x\n", "traffic"),
        ("name: x\ntraffic: {pattern: ring}\n", "traffic.pattern"),
        ("traffic: {pattern: permutation, protocol: sctp}\n", "traffic.protocol"),
        ("traffic: {pattern: permutation, fan_in: 4}\n", "traffic.fan_in"),
        ("traffic: {pattern: incast, fan_in: 1}\n", "traffic.fan_in"),
        ("traffic: {pattern: permutation, rate_gbps: 100}\n", "traffic.rate_gbps"),
        ("traffic: {pattern: jobs, fill: 1.5}\n", "traffic.fill"),
        ("traffic: {pattern: jobs, sizes: {8: -1}}\n", "traffic.sizes.8"),
        ("traffic: {pattern: jobs, collectives: {butterfly: 1}}\n", "traffic.collectives.butterfly"),
        ("traffic: {pattern: permutation}\ntelemetry: {noise: 2}\n", "telemetry.noise"),
        ("traffic: {pattern: permutation}\ntelemetry: {interval: 1}\n", "telemetry.interval"),
        ("traffic: {pattern: permutation}\nengine: {max_moves: 1}\n", "engine.max_moves"),
        ("traffic: {pattern: permutation}\nengine: {min_gain: -1}\n", "engine.min_gain"),
        ("duration_s: 0\ntraffic: {pattern: permutation}\n", "duration_s"),
        ("traffic: {pattern: permutation}\nevents: [{at_s: 99, link_down: 'a:1'}]\n", "events[0].at_s"),
        ("traffic: {pattern: permutation}\nevents: [{at_s: 1, link: 'a:1'}]\n", "events[0]"),
        ("traffic: {pattern: permutation}\ncolour: blue\n", "colour"),
    ],
)
def test_workload_errors_name_the_field(text, field):
    with pytest.raises(WorkloadError) as info:
        parse_workload(text)
    assert info.value.field == field
    assert f"'{field}'" in str(info.value)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("traffic: {pattern: permutation}\nevents: [{at_s: 1, link_down: 'ryl0r0:1'}]\n", "events[0].link_down"),
        ("traffic: {pattern: permutation}\nevents: [{at_s: 1, link_down: 'nope:3'}]\n", "events[0].link_down"),
        ("traffic: {pattern: incast, fan_in: 9}\n", "traffic.fan_in"),
        ("traffic: {pattern: jobs, sizes: [12]}\n", "traffic.sizes.12"),
    ],
)
def test_workload_errors_against_the_fabric_name_the_field(text, field):
    with pytest.raises(WorkloadError) as info:
        build_arms(DEMO, parse_workload(text), 1)
    assert info.value.field == field


def test_every_shipped_workload_loads():
    for name in ("permutation", "incast", "job-mix", "job-mix-large", "link-failure"):
        assert load_workload(name).name == name


def test_the_command_writes_json_and_png_and_refuses_bad_input_in_one_line(tmp_path, capsys):
    assert (
        main(["simulate", "--workload", "permutation", "--duration", "1", "--seed", "3", "--out", str(tmp_path)]) == 0
    )
    out = capsys.readouterr().out
    assert "fraction of optimum" in out
    (path,) = tmp_path.glob("*.json")
    assert json.loads(path.read_text())["fabric"] == "demo"
    assert path.with_suffix(".png").stat().st_size > 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("traffic: {pattern: permutation, protocol: sctp}\n")
    assert main(["simulate", "--workload", str(bad), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("railyard: workload: 'traffic.protocol'")
