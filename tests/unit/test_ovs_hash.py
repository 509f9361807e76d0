"""OVS 3.1's select-group bucket choice (emulation/simulate/ovs_hash.py), and
the simulator's ECMP built on it (emulation/simulate/routes.py).

The known values below were captured from real Open vSwitch (Debian 12's
openvswitch-switch 3.1.0, userspace datapath): a netdev bridge with internal
ports 1..8, one select group per size written by SelectGroup.ofctl (ports
1..n, bucket i watching port i+1), and `ovs-appctl ofproto/trace BRIDGE
'in_port=LOCAL,reg0=n,tcp,nw_src=..,nw_dst=..,tcp_src=..,tcp_dst=..'`,
reading its "bucket i: score s" and "using bucket i" lines; the dead-bucket
cases after `ovs-ofctl mod-port BRIDGE 2 down`. The same setup, with a few
hundred random flows, is tests/integration/test_ovs_select_hash.py.
"""

from __future__ import annotations

import ipaddress

import numpy as np
import pytest

from controller.fabric import addressing as ad
from controller.fabric import build_fabric, load_fabric, parse_spec
from controller.fabric.spec import SPECS_DIR
from emulation.model.pairs import flow_ports, permutation_pairs
from emulation.net.underlay import build_underlay
from emulation.simulate import ovs_hash
from emulation.simulate.routes import Network, build_routes, ecmp_routes, flow_hash, tier_hashes

# (5-tuple, buckets) -> (the bucket OVS used, every bucket's score, the bucket used with port 2 down).
CAPTURED = [
    (("10.0.0.1", "10.1.0.2", "tcp", 40000, 5201), 4, 1, [43419, 57949, 15286, 31731], 0),
    (("10.0.0.1", "10.0.1.1", "tcp", 34567, 5201), 2, 1, [8085, 54030], 0),
    (("10.0.1.2", "10.0.0.2", "tcp", 51234, 5202), 2, 0, [43063, 3867], 0),
    (("10.1.0.1", "10.1.1.2", "udp", 20001, 4791), 3, 2, [2231, 39566, 62076], 2),
    (("10.1.2.3", "10.1.5.7", "udp", 59999, 4792), 8, 7, [20994, 43573, 3019, 3436, 40313, 5691, 31947, 65508], 7),
    (
        ("192.168.7.200", "172.16.0.9", "tcp", 1, 65535),
        8,
        6,
        [29323, 61345, 61253, 12648, 28142, 37749, 63700, 6963],
        6,
    ),
    (("10.3.12.1", "10.3.40.17", "udp", 33000, 4791), 4, 1, [62247, 62758, 18435, 17049], 0),
    (("10.0.0.2", "10.0.1.2", "tcp", 25000, 5299), 3, 2, [13048, 35803, 51970], 2),
]
# Equal scores: OVS's `>=` keeps the later bucket (captured the same way).
TIES = [
    (("10.0.0.1", "10.0.1.1", "tcp", 50754, 5202), 3, 2, [25290, 25290, 50912]),
    (("10.0.0.1", "10.0.1.1", "tcp", 43094, 5297), 4, 1, [54649, 54649, 50004, 26363]),
]


def hashes_of(flows):
    return flow_hash([flow for flow, *_ in flows])


@pytest.mark.parametrize(("flow", "n", "used", "scores", "used_port2_down"), CAPTURED)
def test_scores_and_buckets_match_those_captured_from_ovs(flow, n, used, scores, used_port2_down):
    (h,) = flow_hash([flow])
    assert ovs_hash.bucket_scores(h, np.arange(n, dtype=np.uint32)).tolist() == scores
    assert ovs_hash.best_bucket(np.array([h]), n).tolist() == [used]
    live = np.arange(n) != 1
    assert ovs_hash.best_bucket(np.array([h]), n, live).tolist() == [used_port2_down]


@pytest.mark.parametrize(("flow", "n", "used", "scores"), TIES)
def test_a_tie_goes_to_the_later_bucket(flow, n, used, scores):
    (h,) = flow_hash([flow])
    assert ovs_hash.bucket_scores(h, np.arange(n, dtype=np.uint32)).tolist() == scores
    assert ovs_hash.best_bucket(np.array([h]), n).tolist() == [used]


def test_the_hash_primitives_are_lib_hash_h_murmur_ones():
    # hash_uint64(0) and hash_int: murmur3's fmix32 over mhash_add, by hand.
    def fmix(h):
        h ^= h >> 16
        h = h * 0x85EBCA6B & 0xFFFFFFFF
        h ^= h >> 13
        h = h * 0xC2B2AE35 & 0xFFFFFFFF
        return h ^ h >> 16

    def add(h, d):
        d = d * 0xCC9E2D51 & 0xFFFFFFFF
        d = (d << 15 | d >> 17) & 0xFFFFFFFF
        d = d * 0x1B873593 & 0xFFFFFFFF
        h ^= d
        h = (h << 13 | h >> 19) & 0xFFFFFFFF
        return (h * 5 + 0xE6546B64) & 0xFFFFFFFF

    assert int(ovs_hash.hash_uint64(0)) == fmix(add(add(0, 0), 0) ^ 8)
    assert int(ovs_hash.hash_uint64(0x1234567890)) == fmix(add(add(0, 0x34567890), 0x12) ^ 8)
    assert int(ovs_hash.hash_int(np.uint32(3), np.uint32(77))) == fmix(add(add(3, 0), 77) ^ 8)


def test_ports_count_only_for_tcp_and_udp_and_the_two_hash_alike():
    a, b = int(ipaddress.IPv4Address("10.0.0.1")), int(ipaddress.IPv4Address("10.0.1.1"))
    icmp = ovs_hash.select_hash(
        np.array([a, a]), np.array([b, b]), np.array([1, 1]), np.array([1, 2]), np.array([3, 4])
    )
    assert icmp[0] == icmp[1]
    tcp, udp = flow_hash([("10.0.0.1", "10.0.1.1", "tcp", 1, 3), ("10.0.0.1", "10.0.1.1", "udp", 1, 3)])
    assert tcp != udp  # ip_proto is hashed
    assert flow_hash([("10.0.0.1", "10.0.1.1", 6, 1, 3)])[0] == tcp  # a protocol number works as its name


def test_no_live_bucket_is_no_bucket():
    h = hashes_of(CAPTURED)
    assert np.all(ovs_hash.best_bucket(h, 4, np.zeros(4, dtype=bool)) == -1)


# --- the simulator's ECMP: the bucket the underlay's own groups pick --------------


def rail(spines: int, mode: str):
    return build_fabric(
        parse_spec(
            f"name: r\nkind: rail-optimized\npods: 3\nservers_per_pod: 2\nrails: 2\nspines: {spines}\n"
            f"plane_mode: {mode}\nrates: {{nic_gbps: 400, emulated_nic_mbps: 10}}\n"
        )
    )


def routed(fabric, seed, protocol="tcp"):
    pairs = permutation_pairs(fabric)
    routes = build_routes(Network(fabric), pairs)
    ports = flow_ports(pairs, protocol, seed)  # as expand draws them for a permutation
    keys = [(ad.nic_ip(s), ad.nic_ip(d), protocol, sport, dport) for (s, d), (sport, dport) in zip(pairs, ports)]
    return pairs, routes, tier_hashes(keys)


def leaf_group_ports(fabric, switch):
    """The ports of the one select group build_underlay gives this switch, in bucket order."""
    (group,) = build_underlay(fabric)[switch].groups
    return group.ports


# 12 shared spines: "rys10" sorts before "rys2", so vias and buckets are in different orders.
@pytest.mark.parametrize("fabric", [rail(12, "shared"), rail(3, "per-rail")], ids=["shared-12", "per-rail-3"])
@pytest.mark.parametrize("protocol", ["tcp", "udp"])
def test_a_leaf_sends_each_flow_out_of_the_uplink_its_group_picks(fabric, protocol):
    pairs, routes, hashes = routed(fabric, 5, protocol)
    network = routes.network
    chosen = ecmp_routes(routes, hashes, routes.ingress_usable(network.capacity))
    crossing = routes.hop_count[chosen] > 0
    assert crossing.any()
    for f in np.flatnonzero(crossing):
        leaf = fabric.attachment(pairs[f][0]).node
        ports = leaf_group_ports(fabric, leaf)
        egress = network.egresses[routes.hops[chosen[f], 0]]
        assert egress == (leaf, ports[ovs_hash.best_bucket(hashes[f : f + 1, 0], len(ports))[0]])

    # A dead uplink: its bucket is skipped; everyone else stays put.
    busiest = int(np.bincount(routes.hops[chosen[crossing], 0]).argmax())
    capacity = network.capacity_without([network.link_names[busiest]])
    after = ecmp_routes(routes, hashes, routes.ingress_usable(capacity))
    was_there = routes.hops[chosen, 0] == busiest
    assert np.all(after[~was_there] == chosen[~was_there])
    for f in np.flatnonzero(was_there):
        leaf, dead_port = network.egresses[busiest]
        ports = leaf_group_ports(fabric, leaf)
        live = np.array([p != dead_port for p in ports])
        best = ovs_hash.best_bucket(hashes[f : f + 1, 0], len(ports), live)[0]
        assert network.egresses[routes.hops[after[f], 0]] == (leaf, ports[best])


FAT_TREE = load_fabric(SPECS_DIR / "fat-tree-k4.yaml")


def test_a_fat_tree_hashes_at_the_edge_and_again_at_the_aggregation_switch():
    pairs, routes, hashes = routed(FAT_TREE, 3)
    network = routes.network
    cross_pod = np.array([src.pod != dst.pod for src, dst in pairs])
    assert cross_pod.any()
    assert routes.bucket.shape[1] == 2

    def expected(capacity):
        """Per cross-pod flow, (edge uplink, aggregation uplink) by the two groups in turn."""
        out = {}
        for f in np.flatnonzero(cross_pod):
            edge = FAT_TREE.attachment(pairs[f][0]).node
            ports = leaf_group_ports(FAT_TREE, edge)
            live = np.array([capacity[network.index[(edge, p)]] > 0 for p in ports])
            up = ports[ovs_hash.best_bucket(hashes[f : f + 1, 0], len(ports), live)[0]]
            agg = FAT_TREE.peer(edge, up).node
            agg_ports = leaf_group_ports(FAT_TREE, agg)
            live = np.array([capacity[network.index[(agg, p)]] > 0 for p in agg_ports])
            agg_up = agg_ports[ovs_hash.best_bucket(hashes[f : f + 1, 1], len(agg_ports), live)[0]]
            out[f] = ((edge, up), (agg, agg_up))
        return out

    def taken(capacity):
        chosen = ecmp_routes(routes, hashes, routes.ingress_usable(capacity))
        return {f: tuple(network.egresses[e] for e in routes.hops[chosen[f], :2]) for f in np.flatnonzero(cross_pod)}

    healthy = taken(network.capacity)
    assert healthy == expected(network.capacity)
    # Each tier has its own basis, so the aggregation switch does not just
    # repeat the edge's choice (uplink i is port k/2 + 1 + i at both tiers).
    assert any(agg_up != up for (_, up), (_, agg_up) in healthy.values())

    # A dead aggregation uplink: the aggregation switch re-hashes; the edge does not know.
    (edge_hop, agg_hop) = next(iter(healthy.values()))
    capacity = network.capacity_without([f"{agg_hop[0]}:{agg_hop[1]}"])
    after = taken(capacity)
    assert after == expected(capacity)
    assert all(a[0] == b[0] for a, b in zip(after.values(), healthy.values()))
    assert after != healthy
    # A dead edge uplink: the edge re-hashes.
    capacity = network.capacity_without([f"{edge_hop[0]}:{edge_hop[1]}"])
    assert taken(capacity) == expected(capacity)
