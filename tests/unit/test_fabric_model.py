"""Closed-form checks of every builder, addressing round-trips and routing sets."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.fabric import Endpoint, NicId, PlaneMode, Tier, build_fabric, load_spec, parse_spec
from controller.fabric import addressing as ad
from controller.fabric.cluster_topology import ClusterTopology
from controller.fabric.spec import SPECS_DIR


def rail_spec(pods, servers, rails, spines, mode="shared", oversub=1.0):
    return parse_spec(f"""
kind: rail-optimized
pods: {pods}
servers_per_pod: {servers}
rails: {rails}
spines: {spines}
plane_mode: {mode}
oversubscription: {oversub}
rates: {{nic_gbps: 400, emulated_nic_mbps: 50}}
""")


@pytest.mark.parametrize("pods,servers,rails,spines", [(2, 2, 2, 2), (4, 8, 8, 4), (3, 5, 2, 1)])
def test_rail_optimized_shared_counts(pods, servers, rails, spines):
    fabric = build_fabric(rail_spec(pods, servers, rails, spines))
    assert len(fabric.nics) == pods * servers * rails
    assert len(fabric.switches_in(Tier.LEAF)) == pods * rails
    assert len(fabric.switches_in(Tier.SPINE)) == spines
    access = [link for link in fabric.links if link.is_access]
    assert len(access) == pods * servers * rails
    assert len(fabric.links) - len(access) == pods * rails * spines
    for spine in fabric.switches_in(Tier.SPINE):
        assert len(fabric.ports(spine.name)) == pods * rails


@pytest.mark.parametrize("pods,servers,rails,spines", [(2, 2, 2, 2), (16, 128, 8, 16)])
def test_rail_optimized_per_rail_counts(pods, servers, rails, spines):
    fabric = build_fabric(rail_spec(pods, servers, rails, spines, mode="per-rail"))
    assert len(fabric.switches_in(Tier.SPINE)) == rails * spines
    assert len(fabric.links) == pods * servers * rails + pods * rails * spines
    # a plane's spines only touch that rail's leaves
    for spine in fabric.switches_in(Tier.SPINE):
        peers = {fabric.switch(link.peer(spine.name).node).rail for link in fabric.ports(spine.name).values()}
        assert peers == {spine.plane}
        assert len(fabric.ports(spine.name)) == pods


@pytest.mark.parametrize("k", [4, 6, 8])
def test_fat_tree_closed_form(k):
    fabric = build_fabric(parse_spec(f"kind: fat-tree\nk: {k}\nrates: {{nic_gbps: 1, emulated_nic_mbps: 20}}\n"))
    assert len(fabric.nics) == k**3 // 4
    assert len(fabric.switches_in(Tier.SPINE)) == (k // 2) ** 2
    assert len(fabric.switches_in(Tier.AGG)) == k * k // 2
    assert len(fabric.switches_in(Tier.LEAF)) == k * k // 2
    assert len(fabric.links) == 3 * k**3 // 4  # k^3/4 at each of three layers
    for switch in fabric.switches.values():
        assert len(fabric.ports(switch.name)) == k  # every switch has k ports
    # any two hosts in different pods have (k/2)^2 equal-cost paths
    assert len(fabric.equal_cost_paths(NicId(0, 0, 0), NicId(0, 1, 0))) == (k // 2) ** 2


def test_rail_only_has_no_spines_and_no_cross_rail_path():
    fabric = build_fabric(load_spec(SPECS_DIR / "rail-only.yaml"))
    assert not fabric.switches_in(Tier.SPINE)
    assert len(fabric.switches_in(Tier.LEAF)) == fabric.spec.rails
    assert fabric.equal_cost_paths(NicId(0, 0, 0), NicId(1, 0, 1)) == []
    assert fabric.next_hops("ryl0r0", NicId(1, 0, 1)) == ()


def test_oversubscription_sets_uplink_capacity():
    fabric = build_fabric(rail_spec(2, 8, 2, 2, oversub=2.0))
    leaf = "ryl0r0"
    uplink = fabric.ports(leaf)[9]
    # 8 x 400G down over 2 uplinks at 2:1 -> each uplink 8*400/(2*2) = 800G
    assert uplink.capacity_bps == pytest.approx(800e9)
    down = sum(link.capacity_bps for link in fabric.ports(leaf).values() if link.is_access)
    up = sum(link.capacity_bps for link in fabric.ports(leaf).values() if not link.is_access)
    assert down / up == pytest.approx(2.0)
    assert uplink.emulated_bps == pytest.approx(100e6)


def test_ecmp_sets_follow_the_topology():
    fabric = build_fabric(rail_spec(2, 2, 2, 2))
    remote = NicId(rail=1, pod=1, server=0)
    assert fabric.next_hops("ryl0r1", remote) == (3, 4)  # both uplinks
    assert fabric.next_hops("rys0", remote) == (1 + 1 * 2 + 1,)
    assert fabric.next_hops("ryl1r1", remote) == (1,)
    assert fabric.next_hops("ryl0r0", remote) == (3, 4)  # reaches via spines
    paths = fabric.equal_cost_paths(NicId(1, 0, 1), remote)
    assert sorted(p[1] for p in paths) == ["rys0", "rys1"]


def test_per_rail_planes_do_not_join_rails():
    fabric = build_fabric(rail_spec(2, 2, 2, 2, mode="per-rail"))
    assert fabric.spec.plane_mode is PlaneMode.PER_RAIL
    assert fabric.next_hops("ryl0r0", NicId(rail=1, pod=1, server=0)) == ()
    assert {p[1] for p in fabric.equal_cost_paths(NicId(0, 0, 0), NicId(0, 1, 0))} == {"ryr0s0", "ryr0s1"}


def test_every_port_number_is_derived_and_unique():
    fabric = build_fabric(rail_spec(3, 4, 2, 3))
    for switch in fabric.switches.values():
        ports = sorted(fabric.ports(switch.name))
        assert ports == list(range(1, len(ports) + 1))
    for nic in fabric.nics:
        end = fabric.attachment(nic)
        assert end.node == ad.leaf_name(nic.pod, nic.rail) and end.port == nic.server + 1


NICS = st.builds(NicId, st.integers(0, ad.RAIL_LIMIT - 1), st.integers(0, ad.POD_LIMIT - 1), st.integers(0, 252))


@given(NICS)
def test_nic_address_round_trip(nic):
    rail, pod, server = nic
    address = ad.nic_address(nic)
    assert ad.parse_nic_address(str(address)) == nic
    assert address in ad.leaf_prefix(rail, pod)
    assert sum(address in prefix for prefix in ad.rail_prefixes(rail, pod + 1)) == 1
    assert ad.gateway_address(rail, pod) in ad.leaf_prefix(rail, pod)
    assert ad.nic_mac(nic) != ad.gateway_mac(rail, pod)
    if pod < 256:  # the two-tier layout, unchanged: 10.<rail>.<pod>.<server+1>
        assert str(address) == f"10.{rail}.{pod}.{server + 1}"


@given(NICS, NICS)
def test_addresses_and_macs_are_one_to_one(a, b):
    assert (ad.nic_address(a) == ad.nic_address(b)) == (a == b)
    assert (ad.nic_mac(a) == ad.nic_mac(b)) == (a == b)
    assert ad.gateway_mac(a.rail, a.pod) != ad.nic_mac(b)


@given(st.sampled_from(sorted(ad.TIER_CODES)), st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), st.integers(0, 0xFFFF))
def test_dpid_round_trip(tier, pod, rail, index):
    assert ad.parse_dpid(ad.dpid(tier, pod, rail, index)) == (tier, pod, rail, index)


def test_parse_dpid_rejects_foreign_switches():
    with pytest.raises(ad.AddressError, match="tier code"):
        ad.parse_dpid(0x0000_0000_0000_0001)


@pytest.mark.parametrize("bad", ["11.0.0.1", "10.0.0.254", "10.0.0.0", "10.1.2.255", "x", "10.0.0"])
def test_parse_rejects_non_nic_addresses(bad):
    with pytest.raises(ad.AddressError):
        ad.parse_nic_address(bad)


def test_names_fit_linux_interface_limit_at_the_largest_sizes():
    from controller.fabric.spec import MAX_CLUSTERS, MAX_CORES, MAX_PODS, MAX_RAILS, MAX_SERVERS_PER_POD, MAX_SPINES

    pods = MAX_PODS * MAX_CLUSTERS
    assert pods <= ad.POD_LIMIT
    biggest = NicId(MAX_RAILS - 1, pods - 1, MAX_SERVERS_PER_POD - 1)
    names = [
        ad.nic_name(biggest),
        ad.switch_port_name(ad.leaf_name(pods - 1, MAX_RAILS - 1), MAX_SERVERS_PER_POD + MAX_SPINES),
        ad.switch_port_name(ad.cluster_spine_name(MAX_CLUSTERS - 1, MAX_SPINES - 1), MAX_PODS * MAX_RAILS + MAX_CORES),
        ad.switch_port_name(ad.core_name(MAX_CORES - 1), MAX_CLUSTERS),
        ad.switch_port_name(ad.spine_name(MAX_SPINES - 1, plane=MAX_RAILS - 1), MAX_PODS),
        ad.switch_port_name(ad.spine_name(MAX_SPINES - 1), MAX_PODS * MAX_RAILS),
    ]
    assert max(len(n) for n in names) <= 15, names


def test_names_and_dpids_are_unique():
    fabric = build_fabric(rail_spec(4, 4, 4, 4, mode="per-rail"))
    dpids = [s.dpid for s in fabric.switches.values()]
    assert len(set(dpids)) == len(dpids)
    names = list(fabric.switches) + [ad.nic_name(n) for n in fabric.nics]
    assert len(set(names)) == len(names) and all(n.startswith(ad.NAME_PREFIX) for n in names)


def test_shipped_specs_build():
    for path in sorted(SPECS_DIR.glob("*.yaml")):
        fabric = build_fabric(load_spec(path))
        assert fabric.nics, path
    large = build_fabric(load_spec(SPECS_DIR / "large.yaml"))
    assert large.gpu_count == 16384


@pytest.mark.parametrize("mode", ["shared", "per-rail"])
def test_every_nic_reaches_its_whole_rail(mode):
    # Shared spines also join rails physically; per-rail planes never do.
    fabric = build_fabric(rail_spec(3, 2, 2, 2, mode=mode))
    for a, b in itertools.permutations(fabric.nics, 2):
        same_leaf = fabric.attachment(a).node == fabric.attachment(b).node
        reachable = same_leaf or bool(fabric.equal_cost_paths(a, b))
        assert reachable == (a.rail == b.rail or mode == "shared")


def test_three_tier_ports_follow_their_formulas():
    """Every cable of a three-tier fabric lands where cluster_topology.py's numbering says."""
    spec = parse_spec(
        "clusters: 3\npods: 2\nservers_per_pod: 2\nrails: 2\nspines: 2\n"
        "core: {switches: 4, oversubscription: 2}\nrates: {nic_gbps: 400, emulated_nic_mbps: 50}"
    )
    fabric = build_fabric(spec)
    topo = ClusterTopology(spec)
    for switch in fabric.switches.values():
        assert sorted(fabric.ports(switch.name)) == list(range(1, len(fabric.ports(switch.name)) + 1))
        tier, pod, rail, index = ad.parse_dpid(switch.dpid)
        assert tier == switch.tier.value and index == switch.index
    for pod in range(spec.pods):
        cluster = spec.cluster_of(pod)
        for rail in range(spec.rails):
            leaf = ad.leaf_name(pod, rail)
            assert ad.parse_dpid(fabric.switch(leaf).dpid)[1:3] == (pod, rail)
            for j in range(spec.spines):
                spine = ad.cluster_spine_name(cluster, j)
                assert fabric.peer(leaf, topo.leaf_uplink_port(j)) == (spine, topo.spine_port(pod, rail))
    for cluster in range(spec.clusters):
        for j in range(spec.spines):
            spine = ad.cluster_spine_name(cluster, j)
            assert ad.parse_dpid(fabric.switch(spine).dpid)[1] == cluster
            for i, k in enumerate(topo.plane_cores(j)):
                core = ad.core_name(k)
                assert fabric.peer(spine, topo.spine_core_port(i)) == (core, topo.core_port(cluster))
                assert fabric.switch(core).tier is Tier.CORE
    # Capacities: leaf uplinks carry S/(spines x oversubscription) NICs; a
    # spine's core links its downlinks / core oversubscription, split over its plane's cores.
    nic = spec.rates.nic_gbps * 1e9
    leaf_up = fabric.capacity_bps[Endpoint(ad.leaf_name(0, 0), topo.leaf_uplink_port(0))]
    core_up = fabric.capacity_bps[Endpoint(ad.cluster_spine_name(0, 0), topo.spine_core_port(0))]
    assert leaf_up == pytest.approx(nic * 2 / 2)
    assert core_up == pytest.approx(nic * (2 * 2 * 1) / 2 / 2)
