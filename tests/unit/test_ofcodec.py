"""Golden wire round trips of the overlay's OpenFlow encoding, after os-ken's own
(os_ken/tests/unit/ofproto/test_parser.py): entry -> message -> bytes -> os-ken's
parser -> entry again, for every match and action combination the overlay
produces; and pinned bytes, so that a silent change of encoding is caught."""

from __future__ import annotations

import pytest
from os_ken.ofproto import nicira_ext, ofproto_protocol
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.fabric import DEFAULT_SPEC, NicId, build_fabric, load_spec
from controller.intent.model import FlowMatch, FlowPin
from controller.southbound import ofcodec, wire
from controller.southbound.overlay import (
    COOKIE_ALL,
    COOKIE_PREFIX,
    OverlayEntry,
    OverlayMeter,
    desired_meters,
    pin_entries,
    te_entries,
)
from controller.southbound.switches import CallTable, SwitchSession, overlay_table
from controller.southbound.underlay import (
    PRIORITY_LOCAL_HOST,
    UNDERLAY_COOKIE,
    Ecmp,
    build_underlay,
    underlay_entries,
)
from controller.te.engine import Meter, Move
from tests.fakes import FakeSwitch
from tests.fakes.fake_switch import decode_meter_mod, parse

FABRIC = build_fabric(load_spec(DEFAULT_SPEC))
DP = ofproto_protocol.ProtocolDesc(ofp.OFP_VERSION)
A, B, C = NicId(0, 0, 0), NicId(0, 1, 0), NicId(0, 1, 1)


def _overlay_entries() -> dict[str, OverlayEntry]:
    """One entry of each shape the overlay produces, made by the overlay itself
    (a job's entries are NIC-pair entries like a pair pin's)."""
    remote = ("10.0.0.1", "10.0.1.2", "udp", 41000, 4791)
    local = ("10.0.1.1", "10.0.1.2", "udp", 0, 0)
    meters = [Meter(remote, A, C, 100e9, 1.0), Meter(local, B, C, 100e9, 1.0)]
    te = te_entries(FABRIC, [Move(remote, A, C, "rys1", 1.0, 1.0)], meters)  # UDP: no ACK entry
    metered_move, local_delivery = sorted(te, key=lambda e: e.switch)  # at ryl0r0, at ryl1r0
    underlay = underlay_entries(build_underlay(FABRIC)["ryl0r0"]).values()
    prefix_route = next(e for e in underlay if "group:" in e.actions[-1])
    host_route = next(e for e in underlay if e.priority == PRIORITY_LOCAL_HOST)
    bundled = underlay_entries(build_underlay(FABRIC, Ecmp.OVS_BUNDLE)["ryl0r0"]).values()
    return {
        "prefix route to a select group (underlay)": prefix_route,
        "prefix route to an ovs bundle (underlay)": next(e for e in bundled if "bundle:" in e.actions[-1]),
        "host route, last hop (underlay)": host_route,
        "nic pair (pin)": pin_entries(FABRIC, FlowPin("pair", FlowMatch(A, B), "rys0", symmetric=False))[0],
        "5-tuple tcp (pin)": pin_entries(FABRIC, FlowPin("tcp", FlowMatch(A, B, "tcp", 40000, 5201), "rys1"))[0],
        "tcp dst port only (pin)": pin_entries(FABRIC, FlowPin("dst", FlowMatch(A, B, "tcp", 0, 22), "rys0"))[0],
        "5-tuple udp (pin)": pin_entries(FABRIC, FlowPin("udp", FlowMatch(A, C, "udp", 49152, 4791), "rys0"))[0],
        "5-tuple udp, metered (te move)": metered_move,
        "local delivery, metered, set_field (te)": local_delivery,
    }


ENTRIES = _overlay_entries()


def to_wire(msg, xid: int = 0x52590001) -> bytes:
    msg.set_xid(xid)
    msg.serialize()
    return bytes(msg.buf)


# os-ken's own construction of the overlay's flow mods: the reference that
# wire.py, the encoder Railyard sends with, must match byte for byte.
def _osken_instructions(entry: OverlayEntry) -> list:
    meters, actions = [], []
    for action in entry.actions:
        name, _, arg = action.partition(":")
        if name == "meter":
            meters.append(parser.OFPInstructionMeter(int(arg), ofp.OFPIT_METER))
        elif name == "dec_ttl":
            actions.append(parser.OFPActionDecNwTtl())
        elif name == "output":
            actions.append(parser.OFPActionOutput(int(arg)))
        elif name == "group":
            actions.append(parser.OFPActionGroup(int(arg)))
        elif name == "bundle":
            basis, _, ports = arg.partition(":")
            members = [int(p) for p in ports.split(",")]
            actions.append(
                parser.NXActionBundle(
                    nicira_ext.NX_BD_ALG_HRW, 3, int(basis), nicira_ext.NXM_OF_IN_PORT, len(members), 0, 0, members
                )
            )
        else:
            field, _, value = arg.partition("=")
            actions.append(parser.OFPActionSetField(**{field: value}))
    return [*meters, parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]


def _osken_match(entry: OverlayEntry) -> parser.OFPMatch:
    fields = {k: tuple(v.split("/")) if isinstance(v, str) and "/" in v else v for k, v in entry.match}
    return parser.OFPMatch(**fields)


def osken_add_flow(entry: OverlayEntry) -> parser.OFPFlowMod:
    return parser.OFPFlowMod(
        DP,
        cookie=entry.cookie,
        table_id=wire.OVERLAY_TABLE,
        command=ofp.OFPFC_ADD,
        priority=entry.priority,
        match=_osken_match(entry),
        instructions=_osken_instructions(entry),
    )


def osken_delete_flow(entry: OverlayEntry) -> parser.OFPFlowMod:
    return parser.OFPFlowMod(
        DP,
        cookie=entry.cookie,
        cookie_mask=COOKIE_ALL,
        table_id=wire.OVERLAY_TABLE,
        command=ofp.OFPFC_DELETE_STRICT,
        priority=entry.priority,
        match=_osken_match(entry),
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
    )


@pytest.mark.parametrize("entry", ENTRIES.values(), ids=ENTRIES.keys())
def test_flow_mods_are_byte_for_byte_what_os_ken_sends(entry):
    assert wire.add_flow(entry) == to_wire(osken_add_flow(entry), xid=0)
    assert wire.delete_flow(entry) == to_wire(osken_delete_flow(entry), xid=0)


def test_bundle_messages_are_byte_for_byte_what_os_ken_sends():
    entry, flags = ENTRIES["5-tuple udp, metered (te move)"], ofp.ONF_BF_ATOMIC | ofp.ONF_BF_ORDERED
    inner = osken_add_flow(entry)
    inner.set_xid(0x52590009)
    add = parser.ONFBundleAddMsg(DP, 77, flags, inner, [])
    assert wire.bundle_add(77, wire.add_flow(entry), 0x52590009) == to_wire(add, 0x52590009)
    for ctrl in (ofp.ONF_BCT_OPEN_REQUEST, ofp.ONF_BCT_COMMIT_REQUEST):
        msg = parser.ONFBundleCtrlMsg(DP, 77, ctrl, flags, [])
        assert wire.bundle_ctrl(77, ctrl, 0x5259000A) == to_wire(msg, 0x5259000A)


def test_the_cases_cover_every_action_the_codec_knows():
    kinds = {action.partition(":")[0] for entry in ENTRIES.values() for action in entry.actions}
    assert kinds == {"meter", "dec_ttl", "set_field", "output", "group", "bundle"}
    fields = {name for entry in ENTRIES.values() for name, _ in entry.match}
    assert fields == {"eth_type", "ipv4_src", "ipv4_dst", "ip_proto", "tcp_src", "tcp_dst", "udp_src", "udp_dst"}


@pytest.mark.parametrize("entry", ENTRIES.values(), ids=ENTRIES.keys())
def test_a_flow_add_round_trips_through_the_wire(entry):
    parsed = parse(DP, wire.with_xid(wire.add_flow(entry), 1))
    assert isinstance(parsed, parser.OFPFlowMod) and parsed.command == ofp.OFPFC_ADD
    assert parsed.table_id == wire.OVERLAY_TABLE and (parsed.idle_timeout, parsed.hard_timeout) == (0, 0)
    assert ofcodec.entry_from_stats(entry.switch, parsed) == entry


@pytest.mark.parametrize("entry", ENTRIES.values(), ids=ENTRIES.keys())
def test_a_strict_delete_names_exactly_its_entry(entry):
    parsed = parse(DP, wire.with_xid(wire.delete_flow(entry), 1))
    assert parsed.command == ofp.OFPFC_DELETE_STRICT and not parsed.instructions
    assert (parsed.cookie, parsed.cookie_mask) == (entry.cookie, COOKIE_ALL)
    assert (parsed.out_port, parsed.out_group) == (ofp.OFPP_ANY, ofp.OFPG_ANY)
    assert ofcodec.entry_from_stats(entry.switch, parsed).key == entry.key


def session_on(switch: FakeSwitch) -> SwitchSession:
    calls = CallTable()
    return SwitchSession(switch.name, switch.connect(calls.deliver), calls, timeout_s=1.0)


def test_entries_round_trip_through_a_switch_table_and_its_flow_stats():
    # The way back the reconciler really takes: OFPFlowStats in multipart replies.
    by_switch: dict[str, list[OverlayEntry]] = {}
    for entry in ENTRIES.values():
        by_switch.setdefault(entry.switch, []).append(entry)
    for name, entries in by_switch.items():
        session = session_on(FakeSwitch(name, 1))
        meters = [OverlayMeter(name, int(a[6:]), 1000, 288) for e in entries for a in e.actions if a[:6] == "meter:"]
        session.send_confirmed([ofcodec.meter_mod(session.datapath, m, "add") for m in meters], "meters")
        # The underlay's select groups before the routes that name them (a switch refuses a missing group).
        groups = sorted({int(a[6:]) for e in entries for a in e.actions if a[:6] == "group:"})
        session.send_confirmed([ofcodec.select_group_mod(session.datapath, g, (1, 2), "add") for g in groups], "groups")
        session.commit_bundle([wire.add_flow(e) for e in entries])
        # Each owner reads its own: an overlay dump never shows the underlay, nor the other way round.
        assert session.dump_overlay() == {e.key: e for e in entries if e.cookie != UNDERLAY_COOKIE}
        underlay = overlay_table(name, session.start_underlay_dump().result())
        assert underlay == {e.key: e for e in entries if e.cookie == UNDERLAY_COOKIE}


def test_the_dump_asks_only_for_railyard_cookies():
    switch = FakeSwitch("ryl0r0", 1)
    session = session_on(switch)
    mine = ENTRIES["nic pair (pin)"]
    theirs = OverlayEntry(mine.switch, 100, mine.match, ("output:1",), cookie=0xBEEF)
    session.commit_bundle([wire.add_flow(e) for e in (mine, theirs)])
    assert len(switch.flows) == 2 and session.dump_overlay() == {mine.key: mine}


METERS = [
    OverlayMeter("ryl0r0", 200_001, 12_500, 288),
    OverlayMeter("ryl0r0", 204_095, 1, 288),
    OverlayMeter("ryl0r0", 200_002, 10_000_000, 200_000),
]


@pytest.mark.parametrize("meter", METERS, ids=lambda m: f"{m.rate_kbps}kbps")
@pytest.mark.parametrize("command", ["add", "modify"])
def test_a_meter_mod_round_trips_through_the_wire(meter, command):
    decoded = decode_meter_mod(to_wire(ofcodec.meter_mod(DP, meter, command)))
    assert decoded.command == {"add": ofp.OFPMC_ADD, "modify": ofp.OFPMC_MODIFY}[command]
    assert ofcodec.meter_from_stats(meter.switch, decoded) == meter


def test_a_meter_delete_carries_no_band():
    decoded = decode_meter_mod(to_wire(ofcodec.meter_mod(DP, METERS[0], "delete")))
    assert (decoded.command, decoded.meter_id, decoded.bands) == (ofp.OFPMC_DELETE, METERS[0].meter_id, [])


def test_meters_round_trip_through_meter_config_stats_and_foreign_ids_are_ignored():
    switch = FakeSwitch("ryl0r0", 1)
    session = session_on(switch)
    foreign = OverlayMeter("ryl0r0", 7, 1000, 100)
    session.send_confirmed([ofcodec.meter_mod(session.datapath, m, "add") for m in (*METERS, foreign)], "meters")
    assert set(switch.meters) == {m.meter_id for m in (*METERS, foreign)}
    assert session.dump_meters() == {m.meter_id: m for m in METERS}
    # And what the overlay derives for an incast survives the trip.
    wanted = desired_meters(FABRIC, [Meter(("10.0.0.1", "10.0.1.2", "udp", 1, 2), A, C, 100e9, 1.0)])["ryl0r0"]
    session.send_confirmed([ofcodec.meter_mod(session.datapath, m, "add") for m in wanted.values()], "meters")
    assert {i: m for i, m in session.dump_meters().items() if i in wanted} == wanted


def test_what_the_codec_cannot_read_never_equals_a_desired_entry():
    entry = ENTRIES["nic pair (pin)"]
    parsed = parse(DP, wire.with_xid(wire.add_flow(entry), 1))
    parsed.instructions[-1].actions.append(parser.OFPActionPopVlan())
    assert ofcodec.entry_from_stats(entry.switch, parsed).actions[-1] == "unknown:OFPActionPopVlan"
    # A group action (the underlay's ECMP) is read as one, and no desired entry has one either.
    parsed = parse(DP, wire.with_xid(wire.add_flow(entry), 1))
    parsed.instructions[-1].actions.append(parser.OFPActionGroup(5))
    read = ofcodec.entry_from_stats(entry.switch, parsed)
    assert read.actions[-1] == "group:5" and read != entry
    parsed = parse(DP, wire.with_xid(wire.add_flow(entry), 1))
    parsed.instructions.append(parser.OFPInstructionGotoTable(1))
    assert ofcodec.entry_from_stats(entry.switch, parsed).actions[-1] == "unknown:OFPInstructionGotoTable"
    parsed = parse(DP, wire.with_xid(wire.add_flow(entry), 1))
    parsed.idle_timeout = 10
    assert ofcodec.entry_from_stats(entry.switch, parsed) != entry
    masked = parser.OFPFlowMod(DP, match=parser.OFPMatch(eth_type=0x0800, ipv4_src=("10.0.0.0", "255.255.255.0")))
    read = ofcodec.entry_from_stats(entry.switch, parse(DP, to_wire(masked)))
    assert dict(read.match)["ipv4_src"] == "10.0.0.0/255.255.255.0"
    with pytest.raises(wire.EncodingError, match="no OpenFlow encoding for overlay action 'flood'"):
        wire.add_flow(OverlayEntry(entry.switch, 1, entry.match, ("flood",), entry.cookie))
    with pytest.raises(wire.EncodingError, match="no OpenFlow encoding for match field 'vlan_vid'"):
        wire.add_flow(OverlayEntry(entry.switch, 1, (("vlan_vid", 5),), ("output:1",), entry.cookie))


def test_a_meter_in_another_shape_reads_as_unequal():
    band = parser.OFPMeterBandDscpRemark(rate=1000, burst_size=288, prec_level=1)
    stats = parser.OFPMeterConfigStats(flags=ofcodec.METER_FLAGS, meter_id=200_001, bands=[band])
    assert ofcodec.meter_from_stats("s", stats).rate_kbps == -1
    pktps = parser.OFPMeterConfigStats(ofp.OFPMF_PKTPS | ofp.OFPMF_BURST, 200_001, [parser.OFPMeterBandDrop(1, 2)])
    assert ofcodec.meter_from_stats("s", pktps).rate_kbps == -1


# A 5-tuple TCP entry with a meter: header, flow_mod fixed part, OXM match, meter
# instruction, apply-actions (dec_nw_ttl, output). Pinned: a change here changes
# what every switch is sent, and must be deliberate.
GOLDEN_FLOW_MOD = (
    "040e0088 52590001"  # OF1.3, FLOW_MOD, 136 bytes, xid
    "5259010000000001 0000000000000000"  # cookie, cookie mask
    "00 00 0000 0000 4e84 ffffffff 00000000 00000000 0000 0000"  # table 0, ADD, no timeouts, prio 20100
    "0001 002b"  # OXM match, 43 bytes
    "80000a02 0800"  # eth_type
    "80001401 06"  # ip_proto
    "80001604 0a000001"  # ipv4_src
    "80001804 0a000101"  # ipv4_dst
    "80001a02 9c40"  # tcp_src 40000
    "80001c02 1451"  # tcp_dst 5201
    "0000000000"  # pad to 8
    "0006 0008 00030d41"  # meter 200001
    "0004 0020 00000000"  # apply actions
    "0018 0008 00000000"  # dec_nw_ttl
    "0000 0010 00000003 ffe5 000000000000"  # output:3
)
GOLDEN_METER_MOD = "041d0020 52590002 0000 0005 00030d41 0001 0010 000030d4 00000120 00000000"


def test_golden_flow_mod_bytes():
    entry = OverlayEntry(
        "ryl0r0",
        20100,
        (
            ("eth_type", 0x0800),
            ("ip_proto", 6),
            ("ipv4_dst", "10.0.1.1"),
            ("ipv4_src", "10.0.0.1"),
            ("tcp_dst", 5201),
            ("tcp_src", 40000),
        ),
        ("meter:200001", "dec_ttl", "output:3"),
        COOKIE_PREFIX | 1 << 40 | 1,
    )
    assert wire.with_xid(wire.add_flow(entry), 0x52590001).hex() == GOLDEN_FLOW_MOD.replace(" ", "")
    assert ofcodec.entry_from_stats("ryl0r0", parse(DP, bytes.fromhex(GOLDEN_FLOW_MOD.replace(" ", "")))) == entry


def test_golden_meter_mod_bytes():
    wire = to_wire(ofcodec.meter_mod(DP, OverlayMeter("ryl0r0", 200_001, 12_500, 288), "add"), xid=0x52590002)
    assert wire.hex() == GOLDEN_METER_MOD.replace(" ", "")
