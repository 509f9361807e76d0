"""Routing by formula equals routing by search.

The fabric answers equal-cost paths, vias, hops and ECMP sets from each
builder's formulas (controller/fabric/topology.py). Here a breadth-first
search over the links, the way the model used to route, says what the
answers must be, for small fabrics of every kind; every answer, ordering and
error message must match.
"""

from __future__ import annotations

import itertools
from collections import defaultdict, deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.fabric import Endpoint, Fabric, FabricError, NicId, Tier, build_fabric, load_spec, parse_spec
from controller.fabric import addressing as ad
from controller.fabric.spec import SPECS_DIR

RATES = "\nrates: {nic_gbps: 400, emulated_nic_mbps: 50}\n"


def rail(pods, servers, rails, spines, mode="shared", oversub=1.0):
    return parse_spec(
        f"pods: {pods}\nservers_per_pod: {servers}\nrails: {rails}\nspines: {spines}\n"
        f"plane_mode: {mode}\noversubscription: {oversub}" + RATES
    )


FABRICS = {
    "shared": rail(3, 2, 2, 2),
    "shared-12-spines": rail(3, 2, 2, 12),  # rys10 sorts before rys2
    "shared-one-spine": rail(2, 2, 2, 1),
    "shared-one-pod": rail(1, 2, 3, 2),
    "per-rail": rail(2, 3, 3, 3, mode="per-rail"),
    "per-rail-oversubscribed": rail(3, 4, 2, 11, mode="per-rail", oversub=2.0),
    "per-rail-one-pod": rail(1, 2, 2, 2, mode="per-rail"),
    "rail-only": parse_spec("kind: rail-only\nservers: 3\nrails: 2" + RATES),
    "three-tier": parse_spec(
        "clusters: 2\npods: 2\nservers_per_pod: 2\nrails: 2\nspines: 2\ncore: {switches: 4, oversubscription: 2}"
        + RATES
    ),
    "three-tier-one-core-per-plane": parse_spec(
        "clusters: 3\npods: 2\nservers_per_pod: 1\nrails: 3\nspines: 3\ncore: {switches: 3}" + RATES
    ),
    "three-tier-12-cores": parse_spec(  # ryk10 sorts before ryk2
        "clusters: 2\npods: 1\nservers_per_pod: 2\nrails: 1\nspines: 2\ncore: {switches: 12}" + RATES
    ),
    "fat-tree-k4": parse_spec("kind: fat-tree\nk: 4" + RATES),
    "fat-tree-k6": parse_spec("kind: fat-tree\nk: 6" + RATES),
}


class Reference:
    """Shortest paths by breadth-first search over the fabric's links: the
    model's routing before it was derived by formula, kept here as the oracle."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.ports: dict[str, dict[int, str]] = defaultdict(dict)  # switch -> port -> peer node
        self.attached: dict[NicId, Endpoint] = {}
        nics = {ad.nic_name(n): n for n in fabric.nics}
        for link in fabric.links:
            for here, there in ((link.a, link.b), (link.b, link.a)):
                if here.port:
                    self.ports[here.node][here.port] = there.node
                if not there.port:
                    self.attached[nics[there.node]] = here
        self._dist: dict[str, dict[str, int]] = {}

    def dist(self, leaf: str) -> dict[str, int]:
        if leaf not in self._dist:
            dist, queue = {leaf: 0}, deque([leaf])
            while queue:
                here = queue.popleft()
                for peer in self.ports[here].values():
                    if peer in self.fabric.switches and peer not in dist:
                        dist[peer] = dist[here] + 1
                        queue.append(peer)
            self._dist[leaf] = dist
        return self._dist[leaf]

    def paths(self, src: NicId, dst: NicId) -> list[tuple[str, ...]]:
        a, b = self.attached[src].node, self.attached[dst].node
        dist = self.dist(b)

        def descend(here: str) -> list[tuple[str, ...]]:
            if dist[here] == 0:
                return [(here,)]
            closer = sorted({p for p in self.ports[here].values() if dist.get(p, -1) == dist[here] - 1})
            return [(here, *rest) for node in closer for rest in descend(node)]

        return sorted(descend(a)) if a in dist else []

    def vias(self, src: NicId, dst: NicId) -> tuple[str, ...]:
        return tuple(sorted({p[len(p) // 2] for p in self.paths(src, dst) if len(p) > 1}))

    def switch_hops(self, src: NicId, dst: NicId, via: str | None) -> tuple[Endpoint, ...] | str:
        """The hops of the first path across `via`, or the error message."""
        a, b = self.attached[src].node, self.attached[dst].node
        paths = [p for p in self.paths(src, dst) if via is None or via in p]
        if not paths:
            return f"no equal-cost path from {a} to {b}" + (f" via {via}" if via else "")
        if via is None and len(paths) > 1:
            return f"{a} to {b} has {len(paths)} equal-cost paths: name the one to use"
        return tuple(
            Endpoint(here, min(p for p, peer in self.ports[here].items() if peer == there))
            for here, there in itertools.pairwise(paths[0])
        )

    def egress_path(self, src: NicId, dst: NicId, via: str | None) -> tuple[Endpoint, ...] | str:
        hops = self.switch_hops(src, dst, via)
        if isinstance(hops, str):
            return hops
        return (Endpoint(ad.nic_name(src), 0), *hops, self.attached[dst])

    def next_hops(self, switch: str, dst: NicId) -> tuple[int, ...]:
        end = self.attached[dst]
        dist = self.dist(end.node)
        if switch not in dist:
            return ()
        if dist[switch] == 0:
            return (end.port,)
        return tuple(p for p, peer in sorted(self.ports[switch].items()) if dist.get(peer, -1) == dist[switch] - 1)


def answer(call, *args):
    try:
        return call(*args)
    except FabricError as exc:
        return exc.args[0]


def one_nic_per_leaf(fabric: Fabric, ref: Reference) -> list[NicId]:
    seen: dict[str, NicId] = {}
    for nic in fabric.nics:
        seen.setdefault(ref.attached[nic].node, nic)
    return list(seen.values())


def check_against_search(fabric: Fabric) -> None:
    ref = Reference(fabric)
    # Every switch name is tried as a via (leaves and aggregation switches too:
    # the rule is "the first path that crosses it"), plus names that are no switch.
    candidates = [None, "", "nope", *sorted(fabric.switches)]
    # Answers depend on the two leaves only, so one NIC per leaf, plus a second NIC of the first leaf.
    reps = one_nic_per_leaf(fabric, ref)
    twins = [n for n in fabric.nics if ref.attached[n].node == ref.attached[reps[0]].node]
    for src, dst in itertools.product([*reps, *twins[1:2]], repeat=2):
        assert fabric.equal_cost_paths(src, dst) == ref.paths(src, dst), (src, dst)
        assert fabric.vias(src, dst) == ref.vias(src, dst), (src, dst)
        for via in candidates:
            assert answer(fabric.egress_path, src, dst, via) == ref.egress_path(src, dst, via), (src, dst, via)
            if via is not None:
                hops = ref.switch_hops(src, dst, via)
                hashed = () if isinstance(hops, str) else tuple(h for h in hops if len(ref.next_hops(h.node, dst)) > 1)
                assert fabric.steering_hops(src, dst, via) == hashed, (src, dst, via)
    for switch in [*fabric.switches, "nope", ad.nic_name(reps[0])]:
        for dst in fabric.nics:
            assert fabric.next_hops(switch, dst) == ref.next_hops(switch, dst), (switch, dst)


@pytest.mark.parametrize("name", sorted(FABRICS))
def test_formulas_match_breadth_first_search(name):
    check_against_search(build_fabric(FABRICS[name]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pods=st.integers(1, 4),
    servers=st.integers(1, 3),
    rails=st.integers(1, 3),
    spines=st.integers(1, 12),
    mode=st.sampled_from(["shared", "per-rail"]),
    oversub=st.sampled_from([1.0, 1.5, 4.0]),
)
def test_formulas_match_search_on_random_rail_fabrics(pods, servers, rails, spines, mode, oversub):
    check_against_search(build_fabric(rail(pods, servers, rails, spines, mode, oversub)))


def test_unknown_nics_are_refused_before_any_path_error():
    fabric = build_fabric(FABRICS["per-rail"])
    ghost, nic = NicId(9, 9, 9), NicId(0, 0, 0)
    for call in (fabric.equal_cost_paths, fabric.vias, fabric.egress_path):
        with pytest.raises(FabricError, match="no NIC"):
            call(ghost, nic)
        with pytest.raises(FabricError, match="no NIC"):
            call(nic, ghost)
    with pytest.raises(FabricError, match="no NIC"):
        fabric.next_hops("nope", ghost)
    assert fabric.steering_hops(ghost, nic, "ryr0s0") == ()


def test_no_state_grows_with_the_pairs_asked_for():
    fabric = build_fabric(FABRICS["fat-tree-k6"])
    fabric.warm()

    def sizes() -> dict[str, int]:
        return {key: len(value) if hasattr(value, "__len__") else -1 for key, value in vars(fabric).items()}

    before = sizes()
    for src, dst in itertools.product(fabric.nics, repeat=2):
        fabric.equal_cost_paths(src, dst)
        for via in fabric.vias(src, dst) or (None,):
            fabric.egress_path(src, dst, via)
    assert sizes() == before


@pytest.mark.parametrize(
    "spec,gpus,leaves,spines",
    [("ft2-16k.yaml", 16384, 512, 256), ("large.yaml", 16384, 512, 256), ("rail-2k.yaml", 2048, 128, 128)],
)
def test_scale_specs_run_every_link_at_the_nic_rate(spec, gpus, leaves, spines):
    fabric = build_fabric(load_spec(SPECS_DIR / spec))
    assert fabric.gpu_count == gpus
    assert len(fabric.switches_in(Tier.LEAF)) == leaves and len(fabric.switches_in(Tier.SPINE)) == spines
    assert {link.capacity_bps for link in fabric.links} == {400e9}
    assert max(len(fabric.ports(name)) for name in fabric.switches) <= 64
    src, dst = NicId(3, 0, 1), NicId(3, fabric.spec.pods - 1, 2)
    assert len(fabric.vias(src, dst)) == fabric.spec.spines
    assert fabric.vias(src, NicId(4, 1, 0)) == ()  # planes meet only inside a server
