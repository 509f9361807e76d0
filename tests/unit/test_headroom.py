"""Uplinks placed jobs fill, kept out of the underlay's hash
(controller/te/headroom.py): which ones, how the controller's underlay
leaves them out, and how the simulator's select groups skip them."""

import numpy as np

from controller.fabric import Endpoint, NicId, build_fabric, load_spec
from controller.fabric.spec import SPECS_DIR
from controller.southbound.underlay import Ecmp, build_underlay
from controller.te.headroom import by_switch, hashed_ports, reserved_egresses
from controller.te.jobs import Job, JobFlow, JobRequest, Pattern
from emulation.simulate.routes import Network, build_routes, ecmp_routes, tier_hashes

NARROW = build_fabric(load_spec(SPECS_DIR / "narrow-uplinks.yaml"))  # 3 uplinks of 2/3 a NIC per leaf
SRC, DST = NicId(1, 0, 0), NicId(1, 1, 0)  # rail 1, pod 0 -> pod 1: leaf ryl0r1, ports 3-5 to rys0-rys2
LEAF = "ryl0r1"


def job(*flows: JobFlow) -> Job:
    return Job(JobRequest("ring", 2, Pattern.RING, 0.0), (), flows, 0.0, 0.0)


def qps(*vias: str, gbps: float) -> tuple[JobFlow, ...]:
    return tuple(JobFlow(SRC, DST, gbps * 1e9, via, 49152 + i) for i, via in enumerate(vias))


def test_the_uplinks_a_connections_queue_pairs_fill_are_reserved_and_the_free_one_is_not():
    # The narrow mix's ring: a NIC's 400 Gb/s in two QPs of 200 on two of three 267 Gb/s uplinks.
    reserved = reserved_egresses(NARROW, [job(*qps("rys0", "rys1", gbps=200))])
    assert reserved == {Endpoint(LEAF, 3), Endpoint(LEAF, 4)}
    assert hashed_ports(LEAF, (3, 4, 5), by_switch(reserved)) == (5,)


def test_the_reserved_uplinks_take_the_traffic_again_when_the_one_kept_is_down():
    ring = job(*qps("rys0", "rys1", gbps=200))
    assert reserved_egresses(NARROW, [ring], down=[Endpoint(LEAF, 5)]) == frozenset()
    # A filled uplink down stays out of the hash as a dead port does; the other filled one is still reserved.
    assert reserved_egresses(NARROW, [ring], down=[Endpoint(LEAF, 3)]) == {Endpoint(LEAF, 4)}


def test_jobs_that_load_every_uplink_alike_reserve_none():
    assert reserved_egresses(NARROW, [job(*qps("rys0", "rys1", "rys2", gbps=133))]) == frozenset()
    # A light job leaves more than half the best headroom: the hash keeps every port.
    assert reserved_egresses(NARROW, [job(*qps("rys0", gbps=100))]) == frozenset()
    assert reserved_egresses(NARROW, []) == frozenset()
    # Every uplink over-filled: none is better for the hash, so none is left out.
    full = job(*qps("rys0", "rys0", "rys1", "rys1", "rys2", gbps=200), *qps("rys2", gbps=300))
    assert reserved_egresses(NARROW, [full]) == frozenset()


def test_a_group_whose_every_port_is_reserved_keeps_them_all():
    assert hashed_ports(LEAF, (3, 4), {LEAF: frozenset({3, 4})}) == (3, 4)
    assert hashed_ports("elsewhere", (3, 4), {LEAF: frozenset({3})}) == (3, 4)


def test_the_controllers_underlay_leaves_reserved_ports_out_of_its_groups_and_bundles():
    reserved = by_switch(reserved_egresses(NARROW, [job(*qps("rys0", "rys1", gbps=200))]))
    for ecmp in Ecmp:
        plain, kept = build_underlay(NARROW, ecmp), build_underlay(NARROW, ecmp, reserved)
        hashed = 0
        for before, after in zip(plain[LEAF].routes, kept[LEAF].routes, strict=True):
            if any(a.startswith(("group:", "bundle:")) for a in before.actions):
                hashed += 1
                assert after.actions == ("dec_ttl", "output:5"), (ecmp, after)  # the one port kept
            else:
                assert after == before  # local delivery
        assert hashed == 5 and not kept[LEAF].groups  # the other five leaves, no group left
        assert all(kept[name] == table for name, table in plain.items() if name != LEAF)


def test_the_simulated_hash_skips_reserved_uplinks_unless_they_are_all_that_is_left():
    network = Network(NARROW)
    keys = [("10.1.0.2", "10.1.1.2", "tcp", port, 5201) for port in range(40000, 40060)]
    routes = build_routes(network, [(NicId(1, 0, 1), DST)] * len(keys))
    hashes = tier_hashes(keys)
    capacity = network.capacity_without(())
    reserved = np.zeros(network.size, dtype=bool)
    reserved[[network.index[Endpoint(LEAF, 3)], network.index[Endpoint(LEAF, 4)]]] = True
    plain = ecmp_routes(routes, hashes, routes.ingress_usable(capacity))
    kept = ecmp_routes(routes, hashes, routes.ingress_usable(capacity, reserved))
    assert {routes.via[r] for r in plain} == {"rys0", "rys1", "rys2"}
    assert {routes.via[r] for r in kept} == {"rys2"}
    # Rendezvous hashing: the flows already on the free uplink stay where they were.
    on_free = np.array([routes.via[r] == "rys2" for r in plain])
    assert (kept[on_free] == plain[on_free]).all()
    # The free uplink down: the reserved ones carry the traffic rather than nothing.
    dead = network.capacity_without([f"{LEAF}:5"])
    fallback = ecmp_routes(routes, hashes, routes.ingress_usable(dead, reserved))
    assert {routes.via[r] for r in fallback} == {"rys0", "rys1"}
