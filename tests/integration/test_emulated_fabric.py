"""The emulated fabric on real OVS: wiring, reachability, and the ECMP underlay's behaviour."""

import json
from dataclasses import replace

import pytest

from controller.fabric import NicId, build_fabric
from controller.fabric import addressing as ad
from controller.fabric.spec import NicArbitration
from emulation.net import netns, ovs
from emulation.traffic.counters import counter_delta, ecmp_uplink, port_counters
from emulation.traffic.iperf import TrafficRun, make_flows
from emulation.traffic.probes import rail_pairs, run_elephants, steer_by_source_port, unreachable_pairs


def test_every_nic_reaches_every_nic_of_its_rail(emu):
    pairs = rail_pairs(emu.fabric)
    in_pod = [p for p in pairs if p[0].pod == p[1].pod]
    assert in_pod and len(in_pod) < len(pairs)  # both kinds are exercised
    assert unreachable_pairs(emu, pairs) == []


def test_bridges_are_userspace_secure_openflow13_and_tagged(emu):
    rows = json.loads(
        ovs.run(
            [
                "ovs-vsctl",
                "--format=json",
                "--columns=name,datapath_type,fail_mode,protocols,external_ids,other_config",
                "list",
                "Bridge",
            ]
        )
    )["data"]
    bridges = {row[0]: row for row in rows}
    for switch in emu.fabric.switches.values():
        _name, dp_type, fail_mode, protocols, external_ids, other_config = bridges[switch.name]
        assert dp_type == "netdev" and fail_mode == "secure"
        assert "OpenFlow13" in json.dumps(protocols)
        assert dict(external_ids[1])["railyard-fabric"] == emu.fabric.spec.name
        assert dict(other_config[1])["datapath-id"] == ad.dpid_hex(switch.dpid)
    controllers = ovs.run(["ovs-vsctl", "--columns=target", "list", "Controller"])
    assert emu.fabric.spec.emulation.controller in controllers


def test_links_are_jumbo_shaped_offload_free_and_quick_to_retransmit(emu):
    fabric = emu.fabric
    leaf = "ryl0r0"
    for port, link in fabric.ports(leaf).items():
        intf = ad.switch_port_name(leaf, port)
        assert "mtu 9000" in netns.run(None, ["ip", "link", "show", intf])
        features = netns.run(None, ["ethtool", "-k", intf])
        assert "tcp-segmentation-offload: off" in features and "tx-checksumming: off" in features
        classes = netns.run(None, ["tc", "class", "show", "dev", intf])
        assert f"rate {int(link.emulated_bps / 1e6)}Mbit" in classes
    nic = NicId(0, 0, 0)
    inside = emu.run(nic, ["ip", "-d", "link", "show", ad.nic_name(nic)])
    assert "mtu 9000" in inside and ad.nic_mac(nic) in inside
    assert "htb" in emu.run(nic, ["tc", "qdisc", "show", "dev", ad.nic_name(nic)])
    # The leaf's own prefix and the rail's: every route the NIC has floors TCP's timeout at 10 ms.
    routes = emu.run(nic, ["ip", "route", "show", "dev", ad.nic_name(nic)]).splitlines()
    assert len(routes) == 2 and all("rto_min lock 10ms" in route for route in routes), routes


def test_underlay_is_cookie_zero_with_hash_select_groups(emu):
    for leaf in ("ryl0r0", "ryl1r1"):
        flows = ovs.dump_flows(leaf)
        assert flows and all("cookie=0x0" in f for f in flows)
        groups = ovs.dump_groups(leaf)
        assert len(groups) == 1 and "type=select" in groups[0] and "selection_method=hash" in groups[0]
        uplinks = [e.port for e in emu.fabric.uplinks(leaf)]
        assert all(f"output:{p}" in groups[0] for p in uplinks)


def test_single_elephant_reaches_90_percent_of_its_shaped_rate(emu):
    flow = make_flows([(NicId(0, 0, 0), NicId(0, 1, 0))], "tcp", seed=7)
    run = run_elephants(emu, flow, duration_s=6)
    assert run.results[0].error == ""
    assert run.results[0].goodput_bps >= 0.9 * run.nic_rate_bps, run.to_dict()


def test_hash_spreads_flows_over_uplinks_as_the_switch_predicts(emu):
    """Many low-rate RoCE-like flows from one leaf: the select group's 5-tuple
    hash spreads them over both uplinks, and each uplink's byte counter matches
    the number of flows ofproto/trace says the hash put on it."""
    fabric = emu.fabric
    leaf = "ryl0r0"
    pairs = [(NicId(0, 0, s), NicId(0, 1, s)) for s in range(2)] * 6
    flows = make_flows(pairs, "udp", seed=11, rate_bps=1.5e6)
    predicted = [ecmp_uplink(fabric, f) for f in flows]
    per_uplink = {e: predicted.count(e) for e in fabric.uplinks(leaf)}
    assert all(n > 0 for n in per_uplink.values()), per_uplink  # the hash used every uplink

    before = port_counters(fabric)
    run = TrafficRun(emu.popen, flows, duration_s=4).start()
    results = run.wait()
    delta = counter_delta(before, port_counters(fabric))
    assert all(r.error == "" and r.goodput_bps > 1e6 for r in results), results
    total = sum(delta[e].tx_bytes for e in per_uplink)
    for uplink, n in per_uplink.items():
        share = delta[uplink].tx_bytes / total
        assert share == pytest.approx(n / len(flows), abs=0.1), (uplink, share, per_uplink)


def test_seeded_ecmp_collision_is_visible_in_port_counters(emu):
    """Two elephants from one leaf whose hash lands on the same uplink: that
    uplink carries both (at line rate), the parallel uplink idles, and each
    flow gets about half its NIC rate. This is the problem Railyard fixes."""
    fabric = emu.fabric
    pairs = [(NicId(1, 0, 0), NicId(1, 1, 0)), (NicId(1, 0, 1), NicId(1, 1, 1))]
    flows = steer_by_source_port(emu, pairs, seed=5, want_collision=True)
    run = run_elephants(emu, flows, duration_s=6)
    assert run.ecmp_port[0] == run.ecmp_port[1]
    hot = run.ecmp_port[0]
    assert hot is not None
    (cold,) = [e for e in fabric.uplinks("ryl0r1") if e != hot]
    rate = run.nic_rate_bps
    assert run.uplink_bps[hot] >= 0.9 * rate
    assert run.uplink_bps[cold] < 0.05 * rate
    assert run.aggregate_bps <= 1.05 * rate  # two NICs' worth of demand, one uplink's worth of goodput
    assert hot in run.collisions


def test_spread_elephants_all_run_at_line_rate(emu):
    """Pod 0 -> pod 1 on every rail with source ports the hash spreads: no
    collision, so every flow runs near line rate (one direction only, so no
    flow's ACKs queue behind another's data)."""
    fabric = emu.fabric
    pairs = [(nic, NicId(nic.rail, 1, nic.server)) for nic in fabric.nics if nic.pod == 0]
    flows = steer_by_source_port(emu, pairs, seed=3)
    run = run_elephants(emu, flows, duration_s=6)
    assert not run.collisions
    steady = [r.steady_bps / run.nic_rate_bps for r in run.results]
    assert min(steady) >= 0.9, steady


HERE, ON_LEAF, ACROSS = NicId(0, 0, 0), NicId(0, 0, 1), NicId(0, 1, 0)


@pytest.mark.parametrize(
    "direction, pairs",
    [
        ("nic_arbitration", [(HERE, ON_LEAF), (HERE, ACROSS)]),
        ("receiver_arbitration", [(ON_LEAF, HERE), (ACROSS, HERE)]),
    ],
    ids=["out-of-a-nic", "into-a-nic"],
)
def test_a_per_flow_access_link_puts_each_flow_in_a_queue_of_its_own_and_shares_the_link_in_turn(emu, direction, pairs):
    """A queue per flow on one access link of the running fabric, either way
    (the NIC's egress, or its leaf's egress into it): each flow's packets
    are counted in its own class, two flows (one to or from a server on the
    NIC's leaf, one across the spines) split the link evenly, and the link
    gets its one queue back after."""
    fifo = emu.fabric
    spec = fifo.spec
    emu.fabric = build_fabric(replace(spec, emulation=replace(spec.emulation, **{direction: NicArbitration.PER_FLOW})))
    if direction == "nic_arbitration":
        pid, intf = emu.pid_of(HERE), ad.nic_name(HERE)
    else:
        leaf = fifo.attachment(HERE)
        pid, intf = None, ad.switch_port_name(leaf.node, leaf.port)
    flows = make_flows(pairs, "tcp", seed=5)
    try:
        emu.arbitrate((f.src, f.dst, (f.protocol, f.src_port, f.dst_port)) for f in flows)
        results = TrafficRun(emu.popen, flows, 6.0).start().wait()
        sent = _class_bytes(netns.run(pid, ["tc", "-s", "class", "show", "dev", intf]))
        rates = [r.steady_bps for r in results]
        assert all(r.error == "" for r in results)
        for i, r in enumerate(results):  # what arrived, all of it through the flow's own queue
            assert sent[f"1:{0x100 + i:x}"] >= r.goodput_bps * 6.0 / 8 * 0.95, (sent, rates)
        assert sent["1:20"] < 0.01 * sum(sent[f"1:{0x100 + i:x}"] for i in range(2))
        assert min(rates) >= 0.8 * max(rates) and sum(rates) >= 0.85 * fifo.access_link(HERE).emulated_bps, rates
    finally:
        emu.arbitrate([])
        emu.fabric = fifo
    classes = netns.run(pid, ["tc", "class", "show", "dev", intf])
    assert [line.split()[2] for line in classes.splitlines()] == ["1:1"]
    assert netns.run(pid, ["tc", "filter", "show", "dev", intf]).strip() == ""


def _class_bytes(shown: str) -> dict[str, int]:
    """`tc -s class show` (this tc prints HTB classes as text only, even with -j): bytes sent per class."""
    sent, handle = {}, ""
    for line in shown.splitlines():
        words = line.split()
        if words[:2] == ["class", "htb"]:
            handle = words[2]
        elif words[:1] == ["Sent"] and handle:
            sent[handle] = int(words[1])
    return sent
