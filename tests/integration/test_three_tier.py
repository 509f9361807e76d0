"""The three-tier fabric (controller/fabric/specs/three-tier.yaml) on real
Open vSwitch with the real controller daemon: the underlay hashes twice, at
the leaf over its cluster's spines and at the spine over its plane's cores,
each as the simulator predicts; a path across a chosen core is pinned by
entries at the ingress leaf and the ingress spine.

One fabric and one daemon for the module; each test leaves the intent empty.
"""

import json

import numpy as np
import pytest

from controller.api.gen.railyard.v1 import placement_pb2 as ppb
from controller.fabric import Endpoint, NicId, load_fabric
from controller.fabric import addressing as ad
from controller.fabric.spec import SPECS_DIR
from emulation.simulate.routes import Network, build_routes, ecmp_routes, tier_hashes
from emulation.traffic.counters import counter_delta, port_counters
from emulation.traffic.iperf import FlowSpec, TrafficRun, make_flows
from emulation.traffic.probes import rail_pairs, unreachable_pairs
from tests.integration.helpers import emptied, fabric_with_daemon, railyard_entries, window

SPEC = SPECS_DIR / "three-tier.yaml"


@pytest.fixture(scope="module")
def three_tier(tmp_path_factory):
    with fabric_with_daemon(load_fabric(SPEC), SPEC, tmp_path_factory.mktemp("three-tier")) as both:
        yield both


@pytest.fixture
def emu(three_tier):
    emu, ctl = three_tier
    yield emu
    emptied(ctl)


def test_every_nic_reaches_every_nic_of_its_rail_across_the_core(emu):
    pairs = rail_pairs(emu.fabric)
    across = [p for p in pairs if emu.fabric.spec.cluster_of(p[0].pod) != emu.fabric.spec.cluster_of(p[1].pod)]
    assert across and len(across) < len(pairs)
    assert unreachable_pairs(emu, pairs) == []


def test_leaf_and_spine_hash_each_flow_where_the_simulator_says(emu):
    """Low-rate UDP flows from cluster 0 to cluster 1: every core uplink of
    cluster 0's spines carries the share of them the simulator's model of the
    two select groups (each tier its own hash basis) puts there."""
    fabric = emu.fabric
    pairs = [(NicId(r, p, s), NicId(r, p + 2, s)) for r in range(2) for p in range(2) for s in range(2)] * 3
    flows = make_flows(pairs, "udp", seed=21, rate_bps=1.5e6)
    network = Network(fabric)
    routes = build_routes(network, pairs)
    keys = [(ad.nic_ip(f.src), ad.nic_ip(f.dst), f.protocol, f.src_port, f.dst_port) for f in flows]
    chosen = ecmp_routes(routes, tier_hashes(keys), routes.ingress_usable(network.capacity))
    core_uplinks = [e for e in fabric.capacity_bps if e.node.startswith("ryc0") and e.port > 4]
    predicted = dict.fromkeys(core_uplinks, 0)
    for f in range(len(flows)):
        for hop in routes.hops[chosen[f], : routes.hop_count[chosen[f]]]:
            if network.egresses[hop] in predicted:
                predicted[network.egresses[hop]] += 1
    assert sum(predicted.values()) == len(flows)
    assert sum(n > 0 for n in predicted.values()) >= 3, predicted  # both choice points spread them

    before = port_counters(fabric)
    results = TrafficRun(emu.popen, flows, duration_s=4).start().wait()
    delta = counter_delta(before, port_counters(fabric))
    assert all(r.error == "" and r.goodput_bps > 1e6 for r in results), results
    total = sum(delta[e].tx_bytes for e in core_uplinks)
    for uplink, n in predicted.items():
        assert delta[uplink].tx_bytes / total == pytest.approx(n / len(flows), abs=0.08), (uplink, predicted)


def test_a_pin_across_a_core_is_held_at_the_ingress_leaf_and_spine(emu, three_tier):
    _, ctl = three_tier
    fabric = emu.fabric
    flow = FlowSpec(NicId(0, 0, 0), NicId(0, 2, 0), "tcp", 40011, 5311)  # cluster 0 -> cluster 1
    cores = fabric.vias(flow.src, flow.dst)
    assert cores == ("ryk0", "ryk1", "ryk2", "ryk3")
    nic_bps = fabric.access_link(flow.src).emulated_bps
    run = TrafficRun(emu.popen, [flow], duration_s=8).start()
    try:
        for core in ("ryk3", "ryk0"):  # plane 1, then plane 0: both choice points change
            with ctl.client() as client:
                client.pin_flow(
                    "across", ad.nic_ip(flow.src), ad.nic_ip(flow.dst), core, "tcp", flow.src_port, flow.dst_port
                )
            ctl.wait_reconciles(1)
            hops = fabric.egress_path(flow.src, flow.dst, core)
            leaf_up, spine_up, core_down = hops[1], hops[2], hops[3]
            assert [e["actions"] for e in railyard_entries(leaf_up.node).values()] == [f"dec_ttl,output:{leaf_up.port}"]
            assert [e["actions"] for e in railyard_entries(spine_up.node).values()] == [
                f"dec_ttl,output:{spine_up.port}"
            ]
            before, after = window(fabric, 1.5)
            delta = counter_delta(before, after)
            carried = {c: delta[Endpoint(c, 2)].tx_bytes for c in cores}  # each core's port down to cluster 1
            assert carried[core] > 0.5 * nic_bps * 1.5 / 8, carried  # at least half the NIC's rate crossed it
            assert all(v < carried[core] * 0.02 for c, v in carried.items() if c != core), carried
            assert core_down == Endpoint(core, 2)
    finally:
        (result,) = run.wait()
    assert not result.error and min(result.interval_bps) > 0
    assert np.mean(result.interval_bps) > 0.6 * nic_bps
    # The spec's ack_priority: what the receiver sends back (pure ACKs) left
    # its NIC in the priority class's queue (11:), the data the sender's in 10:.
    assert fabric.spec.emulation.ack_priority
    receiver, sender = nic_queue_packets(emu, flow.dst), nic_queue_packets(emu, flow.src)
    assert receiver["11:"] > 1000 and receiver["10:"] < 0.05 * receiver["11:"], receiver
    assert sender["10:"] > 1000 and sender["11:"] < 0.05 * sender["10:"], sender


def test_score_placements_reports_the_share_crossing_the_core_and_ranks_one_cluster_first(emu, three_tier):
    _, ctl = three_tier
    request = ppb.PlaceJobRequest(job_id="to-score", gpu_count=4, pattern=ppb.COLLECTIVE_PATTERN_RING)
    with ctl.client() as client:
        scored = client.score_placements(request, [["ryh0s0", "ryh2s0"], ["ryh0s0", "ryh1s0"]])  # clusters 0+1; 0
        across, inside = scored.scores
        assert across.feasible and inside.feasible
        assert inside.cross_cluster_share == 0.0 < across.cross_cluster_share
        assert (inside.rank, across.rank) == (1, 2)
        placed = client.place_job("to-score", 4, "ring", servers=["ryh0s0", "ryh2s0"], validate_only=True)
        assert placed.job.cross_cluster_share == across.cross_cluster_share
        assert client.list_jobs() == []


def nic_queue_packets(emu, nic: NicId) -> dict[str, int]:
    """Packets through each pfifo on a NIC's egress, by handle."""
    out = emu.run(nic, ["tc", "-s", "-j", "qdisc", "show", "dev", ad.nic_name(nic)])
    return {q["handle"]: int(q["packets"]) for q in json.loads(out) if q["kind"] == "pfifo"}
