"""The engine's array machinery against plain definitions: the gain test in
arrays (gains.Weights) and in scalars (Fleet.best_move_now) agree, the
route-peak bound never hides a move, the catalog and the via lookup read
flows as the fabric says, and frames carry what the samples said."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.fabric import Endpoint, NicId, build_fabric, parse_spec
from controller.fabric import addressing as ad
from controller.te.engine import Engine, EngineConfig, FlowFrame, PortFrame, Snapshot, TeState
from controller.te.engine.catalog import PAIRS_BETWEEN_PAUSES, FlowCatalog
from controller.te.engine.fleet import Fleet
from controller.te.engine.gains import best_of
from controller.te.engine.links import RELEASED_AT_ONCE, UNKNOWN, LinkIndex
from controller.te.engine.state import Elephants
from controller.te.view import FlowSample, PortSample

RATES = "rates: {nic_gbps: 400, emulated_nic_mbps: 50}\n"
SHAPES = {
    # every route of a leaf pair disjoint from the others
    "shared": "pods: 3\nservers_per_pod: 3\nrails: 2\nspines: 3\n",
    "per-rail": "pods: 3\nservers_per_pod: 3\nrails: 2\nspines: 2\nplane_mode: per-rail\n",
    # two cores per spine plane: cross-cluster routes share their leaf uplink
    "three-tier": (
        "clusters: 2\npods: 2\nservers_per_pod: 2\nrails: 2\nspines: 2\ncore: {switches: 4, oversubscription: 2}\n"
    ),
    # a fat tree's cross-pod routes share links too
    "fat-tree": "kind: fat-tree\nk: 4\n",
}
FABRICS = {name: build_fabric(parse_spec(text + RATES)) for name, text in SHAPES.items()}


def random_fleet(fabric, rng: np.random.Generator, flows: int, dead_links: int = 0):
    """Elephants between random NICs with more than one route between them,
    each on a random route, with random demands, rates and background; a
    few links dead."""
    catalog = FlowCatalog(LinkIndex(fabric))
    nics = list(fabric.nics)
    keys: list[tuple[str, str, str, int, int]] = []
    while len(keys) < flows:
        src, dst = (nics[int(i)] for i in rng.choice(len(nics), 2, replace=False))
        if len(catalog.index.routes(src, dst).vias) > 1:
            keys.append((ad.nic_ip(src), ad.nic_ip(dst), "tcp", 20000 + len(keys), 5201))
    cat = catalog.rows(keys)
    row = catalog.base[cat] + rng.integers(0, catalog.nroutes[cat])
    nic = fabric.spec.rates.nic_gbps * 1e9
    demand = rng.uniform(0.1, 1.0, flows) * nic
    rate = demand * rng.uniform(0.2, 1.0, flows)
    elephants = Elephants(keys, np.arange(flows), cat, rate, rate, demand, row)
    index = catalog.index
    background = np.where(rng.random(len(index.capacity)) < 0.3, rng.uniform(0, 0.6, len(index.capacity)), 0.0)
    background = background * np.where(np.isfinite(index.capacity), index.capacity, 0.0)
    # Half the links measure full (a lone TCP flow fills its own): there only fair shares can tell a gain.
    capacity = np.where(np.isfinite(index.capacity), index.capacity, 0.0)
    full = np.where(rng.random(len(index.capacity)) < 0.5, capacity, 0.0)
    dead = np.zeros(len(index.capacity), dtype=bool)
    dead[rng.choice(index.pad, dead_links, replace=False)] = True
    return Fleet(index, catalog, elephants, background, full, dead), catalog


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(FABRICS)), st.integers(0, 2**32 - 1), st.integers(2, 40), st.integers(0, 3))
def test_the_gain_test_in_arrays_and_in_scalars_agree(shape, seed, flows, dead_links):
    rng = np.random.default_rng(seed)
    fleet, _ = random_fleet(FABRICS[shape], rng, flows, dead_links)
    cfg = EngineConfig()
    metered = rng.random(flows) < 0.2
    found = best_of(fleet, np.arange(flows), cfg, metered)
    by_array = {
        int(i): (int(r), float(g), float(p)) for i, r, g, p in zip(found.elephant, found.route, found.gain, found.peak)
    }
    for i in range(flows):
        scalar = fleet.best_move_now(i, cfg, bool(metered[i]))
        if i not in by_array:
            assert scalar is None, (i, scalar)
        else:
            assert scalar is not None and scalar[0] == by_array[i][0], (i, scalar, by_array[i])
            assert math.isclose(scalar[1], by_array[i][1], rel_tol=1e-9, abs_tol=1e-12)
            assert math.isclose(scalar[2], by_array[i][2], rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["shared", "per-rail"]), st.integers(0, 2**32 - 1), st.integers(2, 60))
def test_the_route_peak_bound_never_hides_a_move(shape, seed, flows):
    rng = np.random.default_rng(seed)
    fleet, _ = random_fleet(FABRICS[shape], rng, flows, dead_links=int(rng.integers(0, 3)))
    cfg = EngineConfig()
    everyone = np.arange(flows)
    found = best_of(fleet, everyone, cfg, np.zeros(flows, dtype=bool))
    assert fleet.may_gain(everyone, cfg)[found.elephant].all()
    # and it stays a bound as elephants move
    for i, row in zip(found.elephant.tolist()[:5], found.route.tolist()):
        fleet.move(i, row)
    found = best_of(fleet, everyone, cfg, np.zeros(flows, dtype=bool))
    assert fleet.may_gain(everyone, cfg)[found.elephant].all()


@pytest.mark.parametrize("shape", sorted(FABRICS))
def test_the_catalog_reads_each_flow_as_the_fabric_does(shape):
    fabric = FABRICS[shape]
    catalog = FlowCatalog(LinkIndex(fabric))
    nics = list(fabric.nics)
    keys = [(ad.nic_ip(s), ad.nic_ip(d), "udp", 4791, 4791) for s in nics[:6] for d in nics[-6:] if s != d]
    keys += [("10.200.0.1", ad.nic_ip(nics[0]), "tcp", 1, 2), ("not an address", "x", "tcp", 1, 2)]
    cat = catalog.rows(keys)
    assert (cat[-2:] == -1).all()  # not NICs of this fabric
    for key, row in zip(keys[:-2], cat[:-2].tolist()):
        src, dst = ad.parse_nic_address(key[0]), ad.parse_nic_address(key[1])
        routes = catalog.index.routes(src, dst)
        assert (catalog.src_nic(row), catalog.dst_nic(row)) == (src, dst)
        assert catalog.base[row] == routes.base and catalog.nroutes[row] == len(routes.vias)
        assert catalog.leaf_names[catalog.leaf[row]] == fabric.attachment(src).node
    assert (catalog.rows(keys) == cat).all()  # the same rows the second time


def test_the_catalog_steps_aside_every_so_many_new_leaf_pairs_and_reads_flows_the_same():
    """A cold start or a catalog started over works out thousands of leaf
    pairs' routes in one cycle: it calls `pause` (the daemon's API goes
    first) once per PAIRS_BETWEEN_PAUSES of them."""
    fabric = build_fabric(parse_spec("pods: 24\nservers_per_pod: 1\nrails: 1\nspines: 2\n" + RATES))
    nics = list(fabric.nics)
    keys = [(ad.nic_ip(s), ad.nic_ip(d), "tcp", 1, 2) for s in nics for d in nics if s != d]  # 552 leaf pairs
    paused: list[int] = []
    catalog = FlowCatalog(LinkIndex(fabric))
    cat = catalog.rows(keys, lambda: paused.append(1))
    assert len(paused) == len(keys) // PAIRS_BETWEEN_PAUSES == 17
    assert (FlowCatalog(LinkIndex(fabric)).rows(keys) == cat).all()
    assert (catalog.rows(keys, lambda: paused.append(1)) == cat).all() and len(paused) == 17  # nothing new: no pause
    # The engine passes its own pause: a cold start on these flows pauses 17 times more than one on a single flow.
    now = 100.0
    flows = {k: FlowSample(100e9, 0, now, None, None) for k in keys}

    def pauses(records) -> int:
        engine, calls = Engine(fabric), []
        engine.pause = lambda: calls.append(1)
        engine.step(TeState(), Snapshot(records, {}, now))
        return len(calls)

    assert pauses(flows) == pauses(dict([next(iter(flows.items()))])) + 17


def test_a_released_index_is_freed_a_few_hundred_leaf_pairs_between_pauses_and_works_as_a_new_one():
    """Freeing a restart's old route table at once held the interpreter
    12-18 ms on ft2-16k (release): it goes RELEASED_AT_ONCE leaf pairs at a
    time, pausing between, and what is left answers as a new index does."""
    fabric = build_fabric(parse_spec("pods: 24\nservers_per_pod: 1\nrails: 1\nspines: 2\n" + RATES))
    nics = list(fabric.nics)
    index = LinkIndex(fabric)
    for s in nics:
        for d in nics:
            if s != d:
                index.routes(s, d)  # 552 leaf pairs
    routes = index.routes(nics[0], nics[1])
    paused: list[int] = []
    index.release(lambda: paused.append(len(index._at)))
    assert paused == [552 - RELEASED_AT_ONCE, 552 - 2 * RELEASED_AT_ONCE, 0]
    assert len(index) == 0 and len(index.table()) == 0
    fresh = LinkIndex(fabric)
    again, new = index.routes(nics[0], nics[1]), fresh.routes(nics[0], nics[1])
    assert again.vias == new.vias == routes.vias and again.base == new.base == 0
    assert (again.hops == routes.hops).all()
    rows = np.arange(len(again.vias))
    assert (index.reverse_rows(rows) == fresh.reverse_rows(rows)).all()  # none left over from before
    assert (index.reverse_rows(rows) >= 0).all()


@pytest.mark.parametrize("shape", sorted(FABRICS))
def test_the_via_of_a_flow_is_the_one_route_its_reported_ports_name(shape):
    fabric = FABRICS[shape]
    index = FlowCatalog(LinkIndex(fabric)).index
    nics = list(fabric.nics)
    for src in nics[:4]:
        for dst in nics[-4:]:
            routes = index.routes(src, dst)
            for via, hops in zip(routes.vias, routes.hops.tolist()):
                ingress, transit = hops[0], hops[1] if len(hops) > 2 else -1
                named = [
                    r for r, h in enumerate(routes.hops.tolist()) if ingress in h and (transit == -1 or transit in h)
                ]
                expected = routes.base + named[0] if len(named) == 1 else -1
                assert index.via_row(routes.base, ingress, transit) == expected
                if expected >= 0:
                    assert index.via_at[expected] == via
                assert index.via_row(routes.base, -1, transit) == -1  # unreported
                assert index.via_row(routes.base, UNKNOWN, transit) == -1  # no egress of this fabric


def test_frames_carry_what_the_samples_say():
    fabric = FABRICS["shared"]
    index = FlowCatalog(LinkIndex(fabric)).index
    src, dst = NicId(0, 0, 0), NicId(0, 1, 0)
    uplink = fabric.egress_path(src, dst, fabric.vias(src, dst)[0])[1]
    key = (ad.nic_ip(src), ad.nic_ip(dst), "tcp", 40000, 5201)
    stray = ("10.0.0.2", ad.nic_ip(dst), "tcp", 40001, 5201)
    flows = FlowFrame.of(
        index, {key: FlowSample(3e9, 10, 5.0, uplink), stray: FlowSample(1e9, 0, 4.0, Endpoint("elsewhere", 1))}
    )
    assert flows.keys == [key, stray] and flows.rate_bps.tolist() == [3e9, 1e9]
    assert flows.ingress.tolist() == [index.ids[uplink], UNKNOWN] and flows.transit.tolist() == [-1, -1]
    ports = PortFrame.of(
        index, {uplink: PortSample(7e9, 0, 0, 5.0, up=False), Endpoint("elsewhere", 1): PortSample(1, 0, 0, 5.0)}
    )
    at = index.ids[uplink]
    assert ports.tx_bps[at] == 7e9 and ports.observed_at[at] == 5.0 and not ports.up[at]
    assert np.isneginf(np.delete(ports.observed_at, at)).all()  # every other port: never reported
