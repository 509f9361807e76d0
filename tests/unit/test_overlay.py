"""Desired overlay and reconcile diff, without a switch."""

import random

import pytest

from controller.errors import Conflict, NotFound
from controller.fabric import DEFAULT_SPEC, NicId, build_fabric, load_spec, parse_spec
from controller.fabric import addressing as ad
from controller.fabric.cluster_topology import ClusterTopology
from controller.fabric.spec import SPECS_DIR
from controller.intent.model import FlowMatch, FlowPin, Intent, IntentError, spines_between, validate_pin
from controller.southbound.overlay import (
    COOKIE_PREFIX_MASK,
    PRIORITY_PIN_FLOW,
    PRIORITY_PIN_PAIR,
    desired_overlay,
    is_railyard_cookie,
    owner_cookie,
)
from controller.southbound.reconcile import apply_delta, diff_table, order_for_adds, order_for_deletes

FABRIC = build_fabric(load_spec(DEFAULT_SPEC))  # 2 pods x 2 servers x 2 rails, spines rys0, rys1
FAT_TREE = build_fabric(parse_spec("kind: fat-tree\nk: 4\nrates: {nic_gbps: 100, emulated_nic_mbps: 20}\n"))

A = NicId(rail=0, pod=0, server=0)
B = NicId(rail=0, pod=1, server=0)
C = NicId(rail=0, pod=1, server=1)


def pin(name="p1", src=A, dst=B, spine="rys0", protocol="tcp", sport=40000, dport=5201, symmetric=True):
    return FlowPin(name, FlowMatch(src, dst, protocol, sport, dport), spine, symmetric)


def entries(intent, fabric=FABRIC):
    return {sw: table for sw, table in desired_overlay(fabric, intent).items() if table}


def test_pin_steers_on_both_source_leaves_only():
    overlay = entries(Intent().with_pin(pin()))
    assert set(overlay) == {"ryl0r0", "ryl1r0"}  # data on the source leaf, ACKs on the destination leaf
    (fwd,) = overlay["ryl0r0"].values()
    (rev,) = overlay["ryl1r0"].values()
    # leaf ports: 1..2 servers, then uplink to spine j at 3 + j
    assert fwd.actions == ("dec_ttl", "output:3") and rev.actions == ("dec_ttl", "output:3")
    assert dict(fwd.match) == {
        "eth_type": 0x0800,
        "ipv4_src": "10.0.0.1",
        "ipv4_dst": "10.0.1.1",
        "ip_proto": 6,
        "tcp_src": 40000,
        "tcp_dst": 5201,
    }
    assert dict(rev.match)["tcp_src"] == 5201 and dict(rev.match)["ipv4_src"] == "10.0.1.1"
    assert fwd.priority == PRIORITY_PIN_FLOW and is_railyard_cookie(fwd.cookie)


def test_moving_a_pin_rewrites_exactly_its_entries():
    before = desired_overlay(FABRIC, Intent().with_pin(pin(spine="rys0")))
    after = desired_overlay(FABRIC, Intent().with_pin(pin(spine="rys1")))
    for switch in FABRIC.switches:
        delta = diff_table(switch, after[switch], before[switch])
        assert not delta.deletes  # same (priority, match): an add replaces in place
        if switch in ("ryl0r0", "ryl1r0"):
            (add,) = delta.adds
            assert add.actions == ("dec_ttl", "output:4")
        else:
            assert delta.empty


def test_adding_and_removing_pins():
    one = Intent().with_pin(pin("p1"))
    two = one.with_pin(pin("p2", dst=C, sport=0, dport=0, protocol="", symmetric=False))
    d_one, d_two = desired_overlay(FABRIC, one), desired_overlay(FABRIC, two)
    delta = diff_table("ryl0r0", d_two["ryl0r0"], d_one["ryl0r0"])
    (added,) = delta.adds
    assert added.priority == PRIORITY_PIN_PAIR and dict(added.match) == {
        "eth_type": 0x0800,
        "ipv4_src": "10.0.0.1",
        "ipv4_dst": "10.0.1.2",
    }
    assert not delta.deletes
    assert diff_table("ryl1r0", d_two["ryl1r0"], d_one["ryl1r0"]).empty  # not symmetric: nothing back

    removed = desired_overlay(FABRIC, two.without_pin("p1"))
    delta = diff_table("ryl0r0", removed["ryl0r0"], d_two["ryl0r0"])
    assert not delta.adds and [dict(e.match)["ipv4_dst"] for e in delta.deletes] == ["10.0.1.1"]
    assert [e.cookie for e in delta.deletes] == [owner_cookie("pin", "p1")]


def test_diff_then_apply_then_diff_is_empty_from_any_start():
    rng = random.Random(7)
    pins = [pin(f"p{i}", sport=40000 + i, spine=rng.choice(["rys0", "rys1"])) for i in range(20)]
    for _ in range(30):
        old = Intent()
        for p in rng.sample(pins, rng.randint(0, 20)):
            old = old.with_pin(p)
        new = Intent()
        for p in rng.sample(pins, rng.randint(0, 20)):
            new = new.with_pin(p)
        installed, desired = desired_overlay(FABRIC, old), desired_overlay(FABRIC, new)
        for switch in FABRIC.switches:
            delta = diff_table(switch, desired[switch], installed[switch])
            after = dict(installed[switch])
            apply_delta(after, delta)
            assert after == desired[switch]
            assert diff_table(switch, desired[switch], after).empty


def test_out_of_order_application_converges():
    rng = random.Random(3)
    installed = desired_overlay(FABRIC, Intent().with_pin(pin("a", sport=1)).with_pin(pin("b", sport=2)))
    desired = desired_overlay(FABRIC, Intent().with_pin(pin("b", sport=2, spine="rys1")).with_pin(pin("c", sport=3)))
    table = dict(installed["ryl0r0"])
    delta = diff_table("ryl0r0", desired["ryl0r0"], table)
    ops = [("add", e) for e in delta.adds] + [("del", e) for e in delta.deletes]
    rng.shuffle(ops)
    for op, entry in ops:
        if op == "add":
            table[entry.key] = entry
        else:
            table.pop(entry.key, None)
    assert table == desired["ryl0r0"]
    # a half-applied delta (one switch crashed mid-way) is finished by the next diff
    partial = dict(installed["ryl0r0"])
    apply_delta(partial, type(delta)("ryl0r0", delta.adds[:1], ()))
    apply_delta(partial, diff_table("ryl0r0", desired["ryl0r0"], partial))
    assert partial == desired["ryl0r0"]


def test_foreign_entries_are_not_railyard():
    assert not is_railyard_cookie(0) and not is_railyard_cookie(0x1234)
    assert owner_cookie("pin", "x") & COOKIE_PREFIX_MASK == owner_cookie("job", "y") & COOKIE_PREFIX_MASK
    assert owner_cookie("pin", "x") != owner_cookie("job", "x") != owner_cookie("pin", "y")


def test_fat_tree_pin_steers_edge_and_agg_and_orders_make_before_break():
    src, dst = NicId(0, 0, 0), NicId(0, 2, 0)
    cores = spines_between(FAT_TREE, src, dst)
    assert len(cores) == 4
    overlay = entries(Intent().with_pin(FlowPin("f", FlowMatch(src, dst), cores[-1], symmetric=False)), FAT_TREE)
    tiers = sorted(FAT_TREE.switch(s).tier.value for s in overlay)
    assert tiers == ["agg", "leaf"]  # the core and the far side have no choice to make
    assert [FAT_TREE.switch(s).tier.value for s in order_for_adds(FAT_TREE, overlay)] == ["agg", "leaf"]
    assert [FAT_TREE.switch(s).tier.value for s in order_for_deletes(FAT_TREE, overlay)] == ["leaf", "agg"]


@pytest.mark.parametrize(
    "bad, field",
    [
        (pin(name="Bad Name"), "name"),
        (pin(spine="rys9"), "spine"),
        (pin(dst=A), "match.dst"),
        (pin(protocol="sctp"), "match.protocol"),
        (pin(sport=70000), "match.src_port"),
        (pin(protocol="", sport=5), "match.src_port"),
        (pin(dst=NicId(0, 0, 1)), "match.dst"),  # same leaf: no spine to choose
    ],
)
def test_invalid_pins_name_the_field(bad, field):
    with pytest.raises(IntentError) as err:
        validate_pin(FABRIC, Intent(), bad)
    assert err.value.field == field and err.value.allowed


def test_overlapping_pins_conflict_and_unknown_pin_is_not_found():
    intent = Intent().with_pin(pin("p1"))
    with pytest.raises(Conflict, match="p1"):
        validate_pin(FABRIC, intent, pin("p2", src=B, dst=A, sport=5201, dport=40000))  # p1's reverse
    validate_pin(FABRIC, intent, pin("p1", spine="rys1"))  # re-pinning the same name is a move
    with pytest.raises(NotFound):
        intent.without_pin("nope")


def test_te_moves_render_below_pins_with_acks_and_round_trip_through_the_switch_table():
    from controller.southbound.overlay import PRIORITY_TE_MOVE, move_from_entry, te_entries
    from controller.te.engine import Move

    key = ("10.0.0.1", "10.0.1.1", "tcp", 40001, 5201)
    move = Move(key, A, B, "rys1", moved_at=5.0, last_seen=5.0)
    entries = te_entries(FABRIC, [move])
    assert {e.switch for e in entries} == {"ryl0r0", "ryl1r0"}  # data at the source leaf, ACKs at the far leaf
    assert all(PRIORITY_PIN_PAIR < e.priority == PRIORITY_TE_MOVE < PRIORITY_PIN_FLOW for e in entries)
    assert all(e.actions == ("dec_ttl", "output:4") for e in entries)
    adopted = [m for m in (move_from_entry(FABRIC, e, now=9.0) for e in entries) if m]
    assert adopted == [Move(key, A, B, "rys1", 9.0, 9.0)]  # the ACK entry is not a move of its own
    # A UDP (RoCE) move has no ACK entry.
    udp = Move(("10.0.0.1", "10.0.1.1", "udp", 49152, 4791), A, B, "rys0", 1.0, 1.0)
    assert [e.switch for e in te_entries(FABRIC, [udp])] == ["ryl0r0"]


def test_pinned_pairs_cover_both_directions_of_symmetric_pins():
    intent = Intent().with_pin(pin("p1"))
    assert intent.pinned_pairs == {(A, B), (B, A)}
    assert Intent().with_pin(pin("p2", symmetric=False)).pinned_pairs == {(A, B)}


def test_incast_meters_ride_on_the_ingress_entry_in_the_switch_units():
    from controller.southbound.overlay import (
        METER_ID_BASE,
        METER_ID_SPAN,
        desired_meters,
        is_railyard_meter,
        meter_ids,
        te_entries,
    )
    from controller.te.engine import Meter, Move

    dst = C
    remote = ("10.0.0.1", "10.0.1.2", "udp", 41000, 4791)
    local = ("10.0.1.1", "10.0.1.2", "udp", 0, 0)  # a flow within one leaf, measured without its ports
    meters = [Meter(remote, A, dst, 100e9, 1.0), Meter(local, B, dst, 100e9, 1.0)]
    entries = te_entries(FABRIC, [Move(remote, A, dst, "rys1", 1.0, 1.0)], meters)
    ids = meter_ids(FABRIC, meters)
    assert all(is_railyard_meter(i) for _, i in ids.values()) and not is_railyard_meter(METER_ID_BASE + METER_ID_SPAN)
    by_switch = {e.switch: e for e in entries}
    assert by_switch["ryl0r0"].actions == (f"meter:{ids[remote][1]}", "dec_ttl", "output:4")
    # The local sender is delivered by the entry that meters it, as the leaf's underlay would.
    assert by_switch["ryl1r0"].actions == (
        f"meter:{ids[local][1]}",
        "dec_ttl",
        "set_field:eth_src=02:52:00:01:ff:fe",
        "set_field:eth_dst=02:52:00:01:00:01",
        f"output:{FABRIC.attachment(dst).port}",
    )
    assert dict(by_switch["ryl1r0"].match)["ip_proto"] == 17 and "udp_src" not in dict(by_switch["ryl1r0"].match)
    # 100 Gb/s of a 400 Gb/s NIC emulated at 50 Mb/s: 12.5 Mb/s on the switch.
    switch_meters = desired_meters(FABRIC, meters)
    assert {m.rate_kbps for table in switch_meters.values() for m in table.values()} == {12500}
    assert set(switch_meters["ryl0r0"]) == {ids[remote][1]} and set(switch_meters["ryl1r0"]) == {ids[local][1]}
    # Same set, same ids; one more meter does not renumber the others.
    more = [*meters, Meter(("10.0.0.2", "10.0.1.2", "udp", 41001, 4792), NicId(0, 0, 1), dst, 100e9, 1.0)]
    assert meter_ids(FABRIC, list(reversed(meters))) == ids
    assert {k: v for k, v in meter_ids(FABRIC, more).items() if k in ids} == ids


def test_meter_delta_adds_changes_and_deletes():
    from controller.southbound.overlay import OverlayMeter
    from controller.southbound.reconcile import diff_meters

    m = {i: OverlayMeter("ryl0r0", i, 1000 * i, 288) for i in (1, 2, 3)}
    delta = diff_meters({1: m[1], 2: OverlayMeter("ryl0r0", 2, 5, 288)}, {2: m[2], 3: m[3]})
    assert delta.adds == (m[1],) and [x.rate_kbps for x in delta.changes] == [5] and delta.deletes == (m[3],)
    assert diff_meters(m, m).empty


def test_a_cross_cluster_move_is_pinned_at_the_ingress_leaf_and_spine_and_adopted_by_its_core():
    from controller.southbound.overlay import move_from_entry, te_entries
    from controller.te.engine import Move

    fabric = build_fabric(load_spec(SPECS_DIR / "three-tier.yaml"))
    src, dst = NicId(rail=0, pod=0, server=0), NicId(rail=1, pod=3, server=1)  # cluster 0 -> cluster 1
    key = (str(ad.nic_address(src)), str(ad.nic_address(dst)), "tcp", 40001, 5201)
    move = Move(key, src, dst, "ryk3", moved_at=5.0, last_seen=5.0)  # core 3: plane 1, the spines ryc*s1
    entries = te_entries(fabric, [move])
    topo = ClusterTopology(fabric.spec)
    steer = {(e.switch, e.actions[-1]) for e in entries}
    assert steer == {
        ("ryl0r0", f"output:{topo.leaf_uplink_port(1)}"),  # data: leaf -> ryc0s1
        ("ryc0s1", f"output:{topo.spine_core_port(1)}"),  # data: ryc0s1 -> ryk3
        ("ryl3r1", f"output:{topo.leaf_uplink_port(1)}"),  # ACKs: far leaf -> ryc1s1
        ("ryc1s1", f"output:{topo.spine_core_port(1)}"),  # ACKs: ryc1s1 -> ryk3
    }
    adopted = [m for m in (move_from_entry(fabric, e, now=9.0) for e in entries) if m]
    assert adopted == [Move(key, src, dst, "ryk3", 9.0, 9.0)]  # from the spine's entry; the leaf's names no core
