"""The overlay's OpenFlow 1.3 messages packed straight to bytes.

os-ken stays the OpenFlow stack (connections, handshakes, parsing what
switches send); this is a faster path to the messages Railyard sends most:
flow mods and the ONF bundle messages that carry them. Building an os-ken
OFPFlowMod runs every field through its generic OXM machinery (netaddr for
addresses), about 100 us per entry; packing the handful of fields the overlay
uses with `struct` is some 20x cheaper. tests/unit/test_ofcodec.py holds it
byte-for-byte to os-ken's own serialisation of the same entries.

Every message is returned with xid 0 and stamped later (`with_xid`): a
bundle's inner flow mod must carry its outer message's xid, and an entry's
encoding is the same whatever bundle it travels in, so it is cached.
"""

from __future__ import annotations

import functools
import ipaddress
import struct

from os_ken.lib import addrconv
from os_ken.ofproto import nicira_ext, ofproto_common
from os_ken.ofproto import ofproto_v1_3 as ofp

from controller.errors import RailyardError
from controller.southbound.overlay import COOKIE_ALL, Match, OverlayEntry

OVERLAY_TABLE = 0
BUNDLE_FLAGS = ofp.ONF_BF_ATOMIC | ofp.ONF_BF_ORDERED

_FLOW_MOD = struct.Struct("!BBHIQQBBHHHIIIH2x")  # header, ofp_flow_mod up to its match
_EXPERIMENTER = struct.Struct("!BBHIII")  # header, experimenter id, experimenter type
_BUNDLE_CTRL = struct.Struct("!IHH")  # bundle id, type, flags (no properties)
_BUNDLE_ADD = struct.Struct("!I2xH")  # bundle id, pad, flags
# Open vSwitch's NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP (nicira-ext.h), which os-ken does not name.
NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP = 3

# OXM (class OPENFLOW_BASIC): field number and value packer per match field.
_OXM_FIELDS: dict[str, tuple[int, struct.Struct]] = {
    "eth_type": (ofp.OFPXMT_OFB_ETH_TYPE, struct.Struct("!H")),
    "ip_proto": (ofp.OFPXMT_OFB_IP_PROTO, struct.Struct("!B")),
    "ipv4_src": (ofp.OFPXMT_OFB_IPV4_SRC, struct.Struct("!I")),
    "ipv4_dst": (ofp.OFPXMT_OFB_IPV4_DST, struct.Struct("!I")),
    "tcp_src": (ofp.OFPXMT_OFB_TCP_SRC, struct.Struct("!H")),
    "tcp_dst": (ofp.OFPXMT_OFB_TCP_DST, struct.Struct("!H")),
    "udp_src": (ofp.OFPXMT_OFB_UDP_SRC, struct.Struct("!H")),
    "udp_dst": (ofp.OFPXMT_OFB_UDP_DST, struct.Struct("!H")),
    "eth_dst": (ofp.OFPXMT_OFB_ETH_DST, struct.Struct("!6s")),
    "eth_src": (ofp.OFPXMT_OFB_ETH_SRC, struct.Struct("!6s")),
}


class EncodingError(RailyardError):
    """An overlay entry this encoder has no OpenFlow for (a bug in the overlay)."""


def _padded(body: bytes) -> bytes:
    return body + bytes(-len(body) % 8)


@functools.lru_cache(maxsize=1 << 16)  # addresses and ports repeat across a switch's entries
def _oxm(field: str, value: int | str) -> bytes:
    try:
        number, packer = _OXM_FIELDS[field]
    except KeyError:
        raise EncodingError(f"no OpenFlow encoding for match field {field!r}") from None
    if field.startswith("ipv4_") and isinstance(value, str) and "/" in value:
        # address/netmask, as a switch reports a prefix: an OXM with its mask
        address, _, mask = value.partition("/")
        header = ofp.OFPXMC_OPENFLOW_BASIC << 16 | number << 9 | 1 << 8 | 2 * packer.size
        return (
            struct.pack("!I", header)
            + packer.pack(int(ipaddress.IPv4Address(address)))
            + packer.pack(int(ipaddress.IPv4Address(mask)))
        )
    if field.startswith("ipv4_"):
        value = int(ipaddress.IPv4Address(value))
    elif field.startswith("eth_") and isinstance(value, str):
        value = addrconv.mac.text_to_bin(value)
    header = ofp.OFPXMC_OPENFLOW_BASIC << 16 | number << 9 | packer.size
    return struct.pack("!I", header) + packer.pack(value)


def _field_number(field_value: tuple[str, int | str]) -> int:
    number = _OXM_FIELDS.get(field_value[0])
    return number[0] if number is not None else 1 << 16  # unknown: _oxm refuses it


def _match(match: Match) -> bytes:
    """ofp_match of type OXM, its fields in field-number order as os-ken writes them."""
    fields = b"".join([_oxm(f, v) for f, v in sorted(match, key=_field_number)])
    return _padded(struct.pack("!HH", ofp.OFPMT_OXM, 4 + len(fields)) + fields)


@functools.lru_cache(maxsize=1 << 12)
def _action(action: str) -> bytes:
    name, _, arg = action.partition(":")
    if name == "output":
        return struct.pack("!HHIH6x", ofp.OFPAT_OUTPUT, 16, int(arg), ofp.OFPCML_MAX)
    if name == "dec_ttl":
        return struct.pack("!HH4x", ofp.OFPAT_DEC_NW_TTL, 8)
    if name == "group":
        return struct.pack("!HHI", ofp.OFPAT_GROUP, 8, int(arg))
    if name == "bundle":
        return _bundle(arg)
    field, _, value = arg.partition("=")
    if name == "set_field" and field in ("eth_src", "eth_dst"):
        body = struct.pack("!HH", ofp.OFPAT_SET_FIELD, 0) + _oxm(field, value)
        body = _padded(body)
        return body[:2] + struct.pack("!H", len(body)) + body[4:]
    raise EncodingError(f"no OpenFlow encoding for overlay action {action!r}")


def _bundle(arg: str) -> bytes:
    """nx_action_bundle (Nicira NXAST_BUNDLE): output to one of the ports,
    chosen by highest random weight over the symmetric L3/L4 hash (UDP
    ports included: RoCEv2's queue pairs differ by them) and the basis."""
    basis, _, ports = arg.partition(":")
    members = [int(p) for p in ports.split(",")]
    body = struct.pack(
        "!HHIHHHHIHHI4x", ofp.OFPAT_EXPERIMENTER, 0, ofproto_common.NX_EXPERIMENTER_ID, nicira_ext.NXAST_BUNDLE,
        nicira_ext.NX_BD_ALG_HRW, NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP, int(basis), nicira_ext.NXM_OF_IN_PORT,
        len(members), 0, 0,
    ) + struct.pack(f"!{len(members)}H", *members)  # fmt: skip
    body = _padded(body)
    return body[:2] + struct.pack("!H", len(body)) + body[4:]


@functools.lru_cache(maxsize=1 << 12)  # a handful of action lists per switch
def _instructions(actions: tuple[str, ...]) -> bytes:
    """'meter:ID' is a meter instruction (it runs first); the rest, in order,
    one apply-actions instruction."""
    meters = b"".join(
        struct.pack("!HHI", ofp.OFPIT_METER, 8, int(a.partition(":")[2])) for a in actions if a.startswith("meter:")
    )
    applied = b"".join(_action(a) for a in actions if not a.startswith("meter:"))
    return meters + struct.pack("!HH4x", ofp.OFPIT_APPLY_ACTIONS, 8 + len(applied)) + applied


def _flow_mod(
    entry: OverlayEntry, command: int, cookie_mask: int, out_port: int, out_group: int, instructions: bytes
) -> bytes:
    body = _match(entry.match) + instructions
    return _FLOW_MOD.pack(
        ofp.OFP_VERSION, ofp.OFPT_FLOW_MOD, _FLOW_MOD.size + len(body), 0,
        entry.cookie, cookie_mask, OVERLAY_TABLE, command, 0, 0, entry.priority,
        ofp.OFP_NO_BUFFER, out_port, out_group, 0,
    ) + body  # fmt: skip


@functools.lru_cache(maxsize=1 << 17)
def add_flow(entry: OverlayEntry) -> bytes:
    """OFPFC_ADD: replaces an entry with the same (priority, match) in place."""
    return _flow_mod(entry, ofp.OFPFC_ADD, 0, 0, 0, _instructions(entry.actions))


@functools.lru_cache(maxsize=1 << 17)
def delete_flow(entry: OverlayEntry) -> bytes:
    """Strict delete scoped to the entry's full cookie: never removes anyone else's entry."""
    return _flow_mod(entry, ofp.OFPFC_DELETE_STRICT, COOKIE_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, b"")


def with_xid(message: bytes, xid: int) -> bytes:
    return message[:4] + xid.to_bytes(4, "big") + message[8:]


def _onf(exp_type: int, xid: int, body: bytes) -> bytes:
    return (
        _EXPERIMENTER.pack(
            ofp.OFP_VERSION,
            ofp.OFPT_EXPERIMENTER,
            _EXPERIMENTER.size + len(body),
            xid,
            ofproto_common.ONF_EXPERIMENTER_ID,
            exp_type,
        )
        + body
    )


def bundle_ctrl(bundle_id: int, ctrl_type: int, xid: int) -> bytes:
    return _onf(ofp.ONF_ET_BUNDLE_CONTROL, xid, _BUNDLE_CTRL.pack(bundle_id, ctrl_type, BUNDLE_FLAGS))


def bundle_add(bundle_id: int, message: bytes, xid: int) -> bytes:
    """`message` (xid 0) wrapped into the bundle; both carry `xid`, as OVS requires."""
    return _onf(ofp.ONF_ET_BUNDLE_ADD_MESSAGE, xid, _BUNDLE_ADD.pack(bundle_id, BUNDLE_FLAGS) + with_xid(message, xid))
