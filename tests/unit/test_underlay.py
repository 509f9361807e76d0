"""The underlay, loaded into fake switches as OpenFlow and asked where packets
leave (tests/fakes/forwarding.py): every same-rail NIC pair is delivered along
exactly the fabric model's equal-cost paths, with the last hop's MAC rewrite,
and never loops."""

import pytest

from controller.fabric import addressing as ad
from controller.fabric import build_fabric, parse_spec
from controller.southbound import underlay as ours
from emulation.net.underlay import HASH_FIELDS, build_underlay
from tests.fakes.forwarding import Packet, fake_fabric, routes


def spec(kind_lines: str):
    return parse_spec(kind_lines + "\nrates: {nic_gbps: 400, emulated_nic_mbps: 50}\n")


FABRICS = {
    "shared": spec("pods: 3\nservers_per_pod: 2\nrails: 2\nspines: 2"),
    "per-rail": spec("pods: 2\nservers_per_pod: 3\nrails: 2\nspines: 3\nplane_mode: per-rail"),
    "fat-tree": spec("kind: fat-tree\nk: 4"),
    "three-tier": spec("clusters: 2\npods: 2\nservers_per_pod: 2\nrails: 2\nspines: 2\ncore: {switches: 4}"),
    "rail-only": spec("kind: rail-only\nservers: 3\nrails: 2"),
}


@pytest.mark.parametrize("name", sorted(FABRICS))
def test_every_same_rail_pair_is_delivered_on_exactly_its_equal_cost_paths(name):
    fabric = build_fabric(FABRICS[name])
    switches = fake_fabric(fabric, build_underlay(fabric))
    for src in fabric.nics:
        for dst in fabric.nics:
            if src == dst or src.rail != dst.rail:
                continue
            found = routes(fabric, switches, Packet(ad.nic_ip(src), ad.nic_ip(dst), "udp", 49152, 4791))
            # The switches' hops are the model's paths, one per via (a spine, or a core), and no other.
            paths = {fabric.egress_path(src, dst, via)[1:] for via in fabric.vias(src, dst) or [None]}
            assert {r.hops for r in found} == paths, (src, dst)
            mac_src, mac_dst = ad.local_delivery_macs(dst)
            for route in found:
                assert route.nic == ad.nic_name(dst)
                assert route.last is not None and route.last.cookie == 0
                assert route.last.actions == ("dec_ttl", f"set_field:eth_src={mac_src}", f"set_field:eth_dst={mac_dst}")


def test_a_rail_only_fabric_routes_no_packet_across_rails():
    fabric = build_fabric(FABRICS["rail-only"])
    switches = fake_fabric(fabric, build_underlay(fabric))
    src, dst = fabric.nics[0], next(n for n in fabric.nics if n.rail != fabric.nics[0].rail)
    (route,) = routes(fabric, switches, Packet(ad.nic_ip(src), ad.nic_ip(dst)))
    assert route.nic is None and route.last is None  # dropped at the source leaf: no entry matches


def test_rail_leaf_uses_one_prefix_route_per_remote_leaf_and_one_group():
    fabric = build_fabric(FABRICS["shared"])
    table = build_underlay(fabric)["ryl0r0"]
    prefixes = [f for f in table.flows if f.nw_dst.prefixlen == 24]
    # every other leaf of every rail is reachable via the shared spines
    assert len(prefixes) == fabric.spec.pods * fabric.spec.rails - 1
    assert len(table.groups) == 1
    assert table.groups[0].ports == tuple(e.port for e in fabric.uplinks("ryl0r0"))
    assert all(f.ofctl().startswith("cookie=0,") for f in table.flows)


def test_select_group_hashes_the_five_tuple():
    fabric = build_fabric(FABRICS["shared"])
    group = build_underlay(fabric)["ryl1r1"].groups[0].ofctl()
    assert "type=select" in group and "selection_method=hash" in group
    for field in HASH_FIELDS:
        assert field in group
    assert {"tcp_src", "udp_src", "udp_dst"} <= set(HASH_FIELDS)


def test_fat_tree_pods_fall_back_to_host_routes_where_a_prefix_spans_edges():
    fabric = build_fabric(FABRICS["fat-tree"])
    table = build_underlay(fabric)["rye0x0"]
    remote_hosts = [f for f in table.flows if f.priority == 2000]
    assert remote_hosts  # pod 0's /24 spans two edges, so /32s are needed
    assert any(f.nw_dst.prefixlen == 24 for f in table.flows)  # other pods aggregate


def test_underlay_is_deterministic():
    fabric = build_fabric(FABRICS["per-rail"])
    assert build_underlay(fabric) == build_underlay(fabric)


@pytest.mark.parametrize("name", sorted(FABRICS))
def test_an_ovs_bundle_underlay_has_the_groups_next_hops_and_the_tiers_basis_and_no_group(name):
    fabric = build_fabric(FABRICS[name])
    grouped, bundled = ours.build_underlay(fabric), ours.build_underlay(fabric, ours.Ecmp.OVS_BUNDLE)
    for switch, table in grouped.items():
        ports = {g.group_id: g.ports for g in table.groups}
        basis = ours.hash_param(fabric.switch(switch).tier) & 0xFFFF
        assert bundled[switch].groups == ()
        for route, same in zip(table.routes, bundled[switch].routes, strict=True):
            assert (route.priority, route.destination) == (same.priority, same.destination)
            *first, last = route.actions
            if last.startswith("group:"):
                members = ",".join(str(p) for p in ports[int(last.partition(":")[2])])
                assert same.actions == (*first, f"bundle:{basis}:{members}")
            else:
                assert same.actions == route.actions
    has_bundles = any(a.startswith("bundle:") for t in bundled.values() for r in t.routes for a in r.actions)
    assert has_bundles == any(t.groups for t in grouped.values())  # rail-only has one next hop everywhere
