"""Reconcile passes against fake switches (tests/fakes): real os-ken messages on
the wire, a real IntentService over SQLite, real fabrics. No OVS, no network.
The order of a pass: meters around the entries that use them, additions
downstream-first and deletions ingress-first (make-before-break)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.fabric import NicId, Tier
from controller.fabric import addressing as ad
from controller.southbound import ofcodec
from controller.southbound.overlay import (
    EntryKey,
    OverlayEntry,
    desired_meters,
)
from emulation.net.underlay import build_underlay
from tests.fakes import Applied, FakeSwitch, StaticTe
from tests.fakes.forwarding import Packet, install_underlay, routes
from tests.fakes.reconciler_rig import (
    FABRIC,
    FAT_TREE,
    Rig,
    clear,
    flow_mods,
    incast_plan,
    journal,
    make_rig,
    meter_of,
    tcp_pin,
)


def test_meters_exist_before_the_entries_that_use_them_and_go_after_them(tmp_path):
    moves, meters = incast_plan()
    te = StaticTe(moves, meters)
    rig = make_rig(FABRIC, tmp_path / "intent.db", te=te)
    assert rig.reconcile()
    log = journal(rig)
    metered = [(n, a) for n, a in enumerate(log) if a.kind == "flow_add" and meter_of(a)]
    assert {a.switch for _, a in metered} == {"ryl0r0", "ryl1r0"}
    for n, entry in metered:
        (added,) = [
            i
            for i, a in enumerate(log)
            if a.kind == "meter_add" and (a.switch, a.msg.meter_id) == (entry.switch, meter_of(entry))
        ]
        assert added < n
    assert rig.installed() == rig.desired() and te.applied_generation == 1
    switch_meters = {name: set(table) for name, table in desired_meters(FABRIC, meters).items() if table}
    assert {name: set(sw.meters) for name, sw in rig.switches.items() if sw.meters} == switch_meters

    # The incast is over: the entries stop naming their meters before the meters go
    # (deleting a meter first would delete the entries that use it with it).
    clear(rig)
    te.meters, te.generation = [], 2
    assert rig.reconcile()
    kinds = [(a.switch, a.kind) for a in journal(rig)]
    assert kinds[:2] == [("ryl0r0", "flow_add"), ("ryl1r0", "flow_delete")]
    assert sorted(kinds[2:]) == [("ryl0r0", "meter_delete"), ("ryl1r0", "meter_delete")]  # any switch order
    assert not any(sw.meters for sw in rig.switches.values())
    assert rig.installed() == rig.desired() and rig.installed()["ryl0r0"]


def steering_gaps(tables: dict[str, dict[EntryKey, OverlayEntry]]) -> list[tuple[str, str]]:
    """(edge, agg) pairs of a fat tree where the edge steers a cross-pod flow onto
    an agg that holds no entry for it: the agg would hash it onto any core."""
    gaps = []
    for name, table in tables.items():
        if FAT_TREE.switch(name).tier is Tier.LEAF:
            for key, entry in table.items():
                agg = FAT_TREE.peer(name, int(entry.actions[-1].removeprefix("output:"))).node
                if key not in tables[agg]:
                    gaps.append((name, agg))
    return gaps


def replay(before: dict[str, dict[EntryKey, OverlayEntry]], log: list[Applied]):
    """The tables after each flow mod of `log`, starting from `before`."""
    tables = {name: dict(table) for name, table in before.items()}
    for applied in log:
        entry = ofcodec.entry_from_stats(applied.switch, applied.msg)
        if applied.kind == "flow_add":
            tables[applied.switch][entry.key] = entry
        else:
            tables[applied.switch].pop(entry.key)
        yield applied, tables


def tiers(rig: Rig, kind: str) -> list[str]:
    return [rig.fabric.switch(a.switch).tier.value for a in journal(rig) if a.kind == kind]


def connected_in(order: str) -> dict[str, FakeSwitch]:
    """Switches connect in any order; the pass must not depend on it."""
    journal: list[Applied] = []
    names = list(FAT_TREE.switches) if order == "fabric" else list(reversed(FAT_TREE.switches))
    return {name: FakeSwitch(name, FAT_TREE.switch(name).dpid, journal) for name in names}


@pytest.mark.parametrize("order", ["fabric", "reversed"])
def test_moving_a_pin_adds_downstream_first_and_deletes_ingress_first(tmp_path, order):
    # Fat tree: a pin steers at the edge (onto an agg) and at the agg (onto a core),
    # on both sides for a symmetric pin. rys0 hangs off agg x0 of each pod, rys3 off x1.
    rig = make_rig(FAT_TREE, tmp_path / "intent.db", switches=connected_in(order))
    pin = tcp_pin("f", NicId(0, 0, 0), NicId(0, 2, 0), "rys0")
    rig.intent.pin_flow(pin)
    assert rig.reconcile()
    assert tiers(rig, "flow_add") == ["agg", "agg", "leaf", "leaf"]
    before = rig.installed()

    clear(rig)
    rig.intent.pin_flow(replace(pin, spine="rys3"))
    assert rig.reconcile()
    assert sorted(flow_mods(rig)) == [
        ("rya0x0", "flow_delete"),
        ("rya0x1", "flow_add"),
        ("rya2x0", "flow_delete"),
        ("rya2x1", "flow_add"),
        ("rye0x0", "flow_add"),  # same (priority, match): rewritten in place
        ("rye2x0", "flow_add"),
    ]
    # Adds downstream-first, then deletes ingress-first, across switches:
    assert [a.kind for a in journal(rig)] == ["flow_add"] * 4 + ["flow_delete"] * 2
    assert tiers(rig, "flow_add") == ["agg", "agg", "leaf", "leaf"]
    # So at no moment does an edge steer onto an agg without the entry: the new aggs
    # hold theirs before the edges turn, the old ones lose theirs after.
    for applied, tables in replay(before, journal(rig)):
        assert not steering_gaps(tables), f"after {applied.kind} on {applied.switch}"
    assert rig.installed() == rig.desired()
    assert {name for name, table in rig.installed().items() if table} == {"rya0x1", "rya2x1", "rye0x0", "rye2x0"}


@pytest.mark.parametrize("order", ["fabric", "reversed"])
def test_removing_a_pin_deletes_at_the_ingress_first(tmp_path, order):
    rig = make_rig(FAT_TREE, tmp_path / "intent.db", switches=connected_in(order))
    rig.intent.pin_flow(tcp_pin("f", NicId(0, 0, 0), NicId(0, 2, 0), "rys2"))
    assert rig.reconcile()
    before = rig.installed()
    clear(rig)
    rig.intent.unpin("f")
    assert rig.reconcile()
    assert tiers(rig, "flow_delete") == ["leaf", "leaf", "agg", "agg"]
    for applied, tables in replay(before, journal(rig)):
        assert not steering_gaps(tables), f"after {applied.kind} on {applied.switch}"
    assert not any(rig.installed().values())


@pytest.mark.parametrize(
    ("fabric", "dst", "spine"),
    [(FABRIC, NicId(0, 1, 0), "rys1"), (FAT_TREE, NicId(0, 2, 0), "rys2")],
    ids=["rail-optimized", "fat-tree"],
)
def test_a_pinned_five_tuple_leaves_by_its_spine_and_its_neighbours_keep_every_branch(tmp_path, fabric, dst, spine):
    # The switches hold the underlay (cookie 0) and what the reconciler sent; the
    # fake switches say where packets leave through both (tests/fakes/forwarding.py).
    rig = make_rig(fabric, tmp_path / "intent.db")
    underlay = build_underlay(fabric)
    for name, switch in rig.switches.items():
        install_underlay(switch, underlay[name])
    src = NicId(0, 0, 0)
    pinned = Packet(ad.nic_ip(src), ad.nic_ip(dst), "tcp", 40000, 5201)
    neighbour = Packet(ad.nic_ip(src), ad.nic_ip(dst), "tcp", 40001, 5201)
    every_branch = {fabric.egress_path(src, dst, via)[1:] for via in fabric.vias(src, dst)}
    assert {r.hops for r in routes(fabric, rig.switches, pinned)} == every_branch

    rig.intent.pin_flow(tcp_pin("p", src, dst, spine))
    assert rig.reconcile()
    (route,) = routes(fabric, rig.switches, pinned)
    assert route.hops == fabric.egress_path(src, dst, spine)[1:] and route.nic == ad.nic_name(dst)
    (ack,) = routes(fabric, rig.switches, pinned.reversed())  # symmetric: the ACKs come back the same way
    assert ack.hops == fabric.egress_path(dst, src, spine)[1:]
    assert {r.hops for r in routes(fabric, rig.switches, neighbour)} == every_branch

    rig.intent.unpin("p")
    assert rig.reconcile()
    assert {r.hops for r in routes(fabric, rig.switches, pinned)} == every_branch
