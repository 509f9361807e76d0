"""Reading flow records out of the userspace datapath's flow dump (lines as OVS 3.1 prints them)."""

import json

from emulation.agent.telemetry_agent import FlowCounters, parse_dp_flow, parse_queues

PORTS = {12: "ryl0r0-eth1", 13: "ryl1r0-eth1", 19: "ryl0r0-eth3", 11: "ryl1r0-eth2", 23: "rys0-eth2", 22: "rys0-eth4"}

HASHED = (
    "recirc_id(0),in_port(12),packet_type(ns=0,id=0),eth_type(0x0800),ipv4(src=10.0.0.2,dst=10.0.1.2,proto=17,"
    "ttl=64,frag=no),udp(src=58839,dst=4792), packets:3781, bytes:33809702, used:0.001s, "
    "actions:set(ipv4(ttl=63)),19"
)
LOCAL = (
    "recirc_id(0),in_port(13),packet_type(ns=0,id=0),eth(src=02:52:00:01:00:00,dst=02:52:00:01:00:01),"
    "eth_type(0x0800),ipv4(dst=10.0.1.2,proto=17,ttl=64,frag=no), packets:3790, bytes:33890180, used:0.001s, "
    "actions:set(eth(src=02:52:00:01:ff:fe)),set(ipv4(ttl=63)),11"
)
TRANSIT = (
    "recirc_id(0),in_port(23),packet_type(ns=0,id=0),eth_type(0x0800),ipv4(dst=10.0.1.2/255.255.255.0,"
    "proto=17,ttl=63,frag=no), packets:3711, bytes:33183762, used:0.001s, actions:set(ipv4(ttl=62)),22"
)


def test_a_hashed_flow_carries_its_five_tuple_and_the_uplink_chosen():
    assert parse_dp_flow(HASHED, PORTS) == (
        "ryl0r0-eth1",
        FlowCounters("10.0.0.2", "10.0.1.2", "udp", 58839, 4792, 33809702, "ryl0r0-eth3"),
    )


def test_a_flow_within_one_leaf_is_wildcarded_to_destination_and_protocol():
    # Local delivery matches the destination only: no source address, no L4
    # ports. The sampler names the source from the ingress port.
    assert parse_dp_flow(LOCAL, PORTS) == (
        "ryl1r0-eth1",
        FlowCounters("", "10.0.1.2", "udp", 0, 0, 33890180, "ryl1r0-eth2"),
    )


def test_a_prefix_route_keeps_only_the_address():
    parsed = parse_dp_flow(TRANSIT, PORTS)
    assert parsed is not None
    port, counters = parsed
    assert port == "rys0-eth2" and counters.dst == "10.0.1.2" and counters.src == ""
    assert parse_dp_flow("recirc_id(0),in_port(12),eth_type(0x0806), packets:1, bytes:42, actions:1", PORTS) is None


def test_an_egress_queue_is_its_pfifos_summed_and_htb_itself_is_not_one():
    def qdisc(dev, kind, handle, backlog, drops, root=False):
        q = {"kind": kind, "handle": handle, "dev": dev, "backlog": backlog, "drops": drops}
        return {**q, "root": True} if root else q

    shown = [
        qdisc("ryl0r0-eth3", "htb", "1:", 0, 0, root=True),
        qdisc("ryl0r0-eth3", "pfifo", "10:", 54000, 7),  # data
        qdisc("ryl0r0-eth3", "pfifo", "11:", 132, 0),  # ACKs, with ack_priority
        qdisc("ryl0r0-eth4", "htb", "1:", 0, 0, root=True),
        qdisc("ryl0r0-eth4", "pfifo", "10:", 9000, 1),
    ]
    assert parse_queues(json.dumps(shown)) == {"ryl0r0-eth3": (54132, 7), "ryl0r0-eth4": (9000, 1)}
    assert parse_queues("") == {}
