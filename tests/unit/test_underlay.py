"""The underlay tables, walked by a tiny forwarding model: every same-rail NIC
pair is delivered along every ECMP branch, with last-hop MAC rewrite, and never loops."""

import ipaddress
import re

import pytest

from controller.fabric import NicId, build_fabric, parse_spec
from controller.fabric import addressing as ad
from emulation.net.underlay import HASH_FIELDS, build_underlay


def spec(kind_lines: str):
    return parse_spec(kind_lines + "\nrates: {nic_gbps: 400, emulated_nic_mbps: 50}\n")


FABRICS = {
    "shared": spec("pods: 3\nservers_per_pod: 2\nrails: 2\nspines: 2"),
    "per-rail": spec("pods: 2\nservers_per_pod: 3\nrails: 2\nspines: 3\nplane_mode: per-rail"),
    "fat-tree": spec("kind: fat-tree\nk: 4"),
    "three-tier": spec("clusters: 2\npods: 2\nservers_per_pod: 2\nrails: 2\nspines: 2\ncore: {switches: 4}"),
    "rail-only": spec("kind: rail-only\nservers: 3\nrails: 2"),
}


def lookup(table, dst):
    best = None
    for flow in table.flows:
        nw_dst = re.search(r"nw_dst=([\d./]+)", flow.match)
        assert nw_dst is not None, flow.match
        net = ipaddress.IPv4Network(nw_dst.group(1))
        if dst in net and (best is None or flow.priority > best.priority):
            best = flow
    return best


def next_ports(table, actions):
    if m := re.search(r"group:(\d+)", actions):
        (group,) = [g for g in table.groups if g.group_id == int(m.group(1))]
        return list(group.ports)
    output = re.search(r"output:(\d+)", actions)
    assert output is not None, actions
    return [int(output.group(1))]


def deliveries(fabric, tables, src: NicId, dst: NicId):
    """Every (nic reached, hops, actions at last hop) over all ECMP branches."""
    address = ad.nic_address(dst)
    results = []
    stack = [(fabric.attachment(src).node, 0)]
    while stack:
        switch, hops = stack.pop()
        assert hops < 8, "forwarding loop"
        flow = lookup(tables[switch], address)
        assert flow is not None, f"{switch} has no route to {address}"
        for port in next_ports(tables[switch], flow.actions):
            peer = fabric.peer(switch, port)
            if peer.port == 0:
                results.append((peer.node, hops + 1, flow.actions))
            else:
                stack.append((peer.node, hops + 1))
    return results


@pytest.mark.parametrize("name", sorted(FABRICS))
def test_every_same_rail_pair_is_delivered_on_every_branch(name):
    fabric = build_fabric(FABRICS[name])
    tables = build_underlay(fabric)
    for src in fabric.nics:
        for dst in fabric.nics:
            if src == dst or src.rail != dst.rail:
                continue
            reached = deliveries(fabric, tables, src, dst)
            assert reached, (src, dst)
            for nic, _hops, actions in reached:
                assert nic == ad.nic_name(dst)
                assert f"set_field:{ad.nic_mac(dst)}->eth_dst" in actions
                assert "dec_ttl" in actions
            # all branches are equally short (ECMP over shortest paths only)
            assert len({hops for _, hops, _ in reached}) == 1


def test_rail_leaf_uses_one_prefix_route_per_remote_leaf_and_one_group():
    fabric = build_fabric(FABRICS["shared"])
    table = build_underlay(fabric)["ryl0r0"]
    prefixes = [f for f in table.flows if f.match.endswith("/24")]
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
    assert any(f.match.endswith("/24") for f in table.flows)  # other pods aggregate


def test_underlay_is_deterministic():
    fabric = build_fabric(FABRICS["per-rail"])
    assert build_underlay(fabric) == build_underlay(fabric)
