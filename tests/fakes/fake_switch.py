"""A fake OpenFlow 1.3 switch for unit tests: real os-ken messages, dicts for tables.

On the pattern of Faucet's fake OpenFlow table (clib/fakeoftable.py) and
os-ken's golden wire round trips: every message the code sends is serialized
by os-ken, decoded back from the bytes and applied to the switch's state;
every reply is packed on the wire and parsed by os-ken's parser, so the code
gets what a real connection would hand it. os-ken parses only what a switch
sends (plus flow mods), so the requests it cannot parse (meter mod, barrier,
multipart requests) are decoded here with its own pack strings and body
parsers.

Semantics follow Open vSwitch: a bundle is checked and applied at commit,
all or nothing; a refused commit answers with an error for the failing
message, then an ONF "message failed" error for the commit. A flow naming a
missing meter is refused; deleting a meter deletes the flows that use it.

Flow mods outside a bundle and select-group mods are applied too (the
underlay arrives that way, tests/fakes/forwarding.py), so the tables answer
where a packet leaves (forwarding.py), as Faucet's `FakeOFTable.is_output` does.

Replies are delivered synchronously, from inside send_msg, to
`deliver(dpid, msg)` (e.g. CallTable.deliver): the caller opens its call
before sending, so tests need no threads and are deterministic.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from os_ken.ofproto import ofproto_common, ofproto_parser, ofproto_protocol
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

Deliver = Callable[[int, Any], object]
FlowKey = tuple[int, int, tuple]  # (table id, priority, match): a flow's identity in OpenFlow


@dataclass(frozen=True)
class MeterMod:
    """A decoded OFPT_METER_MOD (os-ken has no parser for it); reads like OFPMeterConfigStats."""

    command: int
    flags: int
    meter_id: int
    bands: list


@dataclass(frozen=True)
class GroupMod:
    """A decoded OFPT_GROUP_MOD (os-ken has no parser for it)."""

    command: int
    type: int
    group_id: int
    buckets: list


@dataclass(frozen=True)
class Applied:
    """One state change, in the order the switch made it."""

    switch: str
    kind: str  # flow_add | flow_delete | meter_add | meter_modify | meter_delete
    msg: Any  # the parsed OFPFlowMod, or a MeterMod


_METER_KINDS = {ofp.OFPMC_ADD: "meter_add", ofp.OFPMC_MODIFY: "meter_modify", ofp.OFPMC_DELETE: "meter_delete"}
_FLOW_KINDS = {ofp.OFPFC_ADD: "flow_add", ofp.OFPFC_DELETE_STRICT: "flow_delete"}


def parse(datapath, buf: bytes) -> Any:
    """Bytes -> os-ken message, as os-ken's receive loop does it."""
    version, msg_type, msg_len, xid = ofproto_parser.header(buf)
    return ofproto_parser.msg(datapath, version, msg_type, msg_len, xid, buf[:msg_len])


_NAMES: dict[int, Any] = {
    ofp.OFPT_FLOW_MOD: "OFPFlowMod",
    ofp.OFPT_METER_MOD: "OFPMeterMod",
    ofp.OFPT_GROUP_MOD: "OFPGroupMod",
    ofp.OFPT_BARRIER_REQUEST: "OFPBarrierRequest",
    ofp.OFPT_ECHO_REQUEST: "OFPEchoRequest",
    ofp.OFPT_MULTIPART_REQUEST: {
        ofp.OFPMP_FLOW: "OFPFlowStatsRequest",
        ofp.OFPMP_AGGREGATE: "OFPAggregateStatsRequest",
        ofp.OFPMP_METER_CONFIG: "OFPMeterConfigStatsRequest",
    },
    ofp.OFPT_EXPERIMENTER: {
        ofp.ONF_ET_BUNDLE_CONTROL: "ONFBundleCtrlMsg",
        ofp.ONF_ET_BUNDLE_ADD_MESSAGE: "ONFBundleAddMsg",
    },
}


def message_name(buf: bytes) -> str:
    """The os-ken class name of a request, read from its bytes (os-ken parses
    only what switches send)."""
    _, msg_type, _, _ = ofproto_parser.header(buf)
    name = _NAMES.get(msg_type, f"type {msg_type}")
    if msg_type == ofp.OFPT_MULTIPART_REQUEST:
        name = name.get(struct.unpack_from("!H", buf, ofp.OFP_HEADER_SIZE)[0], "multipart")
    elif msg_type == ofp.OFPT_EXPERIMENTER:
        name = name.get(struct.unpack_from("!I", buf, ofp.OFP_HEADER_SIZE + 4)[0], "experimenter")
    return name


def _parts(buf: bytes, offset: int, parse: Callable[[bytes, int], Any]) -> list:
    """Length-prefixed items from `offset` to the end (a meter's bands, a group's buckets)."""
    parts = []
    while offset < len(buf):
        parts.append(parse(buf, offset))
        offset += parts[-1].len
    return parts


def decode_meter_mod(buf: bytes) -> MeterMod:
    command, flags, meter_id = struct.unpack_from(ofp.OFP_METER_MOD_PACK_STR, buf, ofp.OFP_HEADER_SIZE)
    return MeterMod(command, flags, meter_id, _parts(buf, ofp.OFP_METER_MOD_SIZE, parser.OFPMeterBandHeader.parser))


def decode_group_mod(buf: bytes) -> GroupMod:
    command, type_, group_id = struct.unpack_from(ofp.OFP_GROUP_MOD_PACK_STR, buf, ofp.OFP_HEADER_SIZE)
    return GroupMod(command, type_, group_id, _parts(buf, ofp.OFP_GROUP_MOD_SIZE, parser.OFPBucket.parser))


def flow_key(mod) -> FlowKey:
    return mod.table_id, mod.priority, tuple(sorted(mod.match.items()))


def _flow_stats(mod) -> bytes:
    buf = bytearray(ofp.OFP_FLOW_STATS_0_SIZE)
    match = parser.OFPMatch(_ordered_fields=list(mod.match.items()))  # a parsed match serializes only once
    length = ofp.OFP_FLOW_STATS_0_SIZE + match.serialize(buf, ofp.OFP_FLOW_STATS_0_SIZE)
    for inst in mod.instructions:
        inst.serialize(buf, length)
        length += inst.len
    struct.pack_into(
        ofp.OFP_FLOW_STATS_0_PACK_STR, buf, 0, length, mod.table_id, 0, 0, mod.priority,
        mod.idle_timeout, mod.hard_timeout, mod.flags, mod.cookie, 0, 0,
    )  # fmt: skip
    return bytes(buf)


def _meter_config(meter: MeterMod) -> bytes:
    buf = bytearray(ofp.OFP_METER_CONFIG_SIZE)
    for band in meter.bands:
        band.serialize(buf, len(buf))
    struct.pack_into(ofp.OFP_METER_CONFIG_PACK_STR, buf, 0, len(buf), meter.flags, meter.meter_id)
    return bytes(buf)


class FakeSwitch:
    """A switch's state, which outlives its connections (see `connect`)."""

    def __init__(self, name: str, dpid: int, journal: list[Applied] | None = None, stats_per_reply: int = 2):
        self.name = name
        self.dpid = dpid
        self.flows: dict[FlowKey, Any] = {}  # -> the OFPFlowMod that installed it
        self.meters: dict[int, MeterMod] = {}
        self.groups: dict[int, GroupMod] = {}
        self.journal: list[Applied] = [] if journal is None else journal  # share one to order across switches
        self.received: list[str] = []  # class name of every message sent to it
        self.replies: list[Any] = []  # every reply, delivered or dropped
        # Small, so that multi-message (OFPMPF_REPLY_MORE) replies are the norm in tests.
        self.stats_per_reply = stats_per_reply
        # Failure injection.
        self.refuse_in_next_bundle: int | None = None  # index of the flow mod the next commit refuses
        self.out_of_bundles = False  # refuse every bundle open (an ONF experimenter error)
        self.drop_replies = False  # answer nothing: the caller times out
        self.hang_up = False  # drop the connection on the next message, unanswered

    def connect(self, deliver: Deliver, on_close: Callable[[Any], object] | None = None) -> FakeDatapath:
        """A new connection; `on_close(datapath)` plays os-ken's DEAD state change."""
        return FakeDatapath(self, deliver, on_close)


class FakeDatapath(ofproto_protocol.ProtocolDesc):
    """What the code uses of os-ken's Datapath: id, ofproto, ofproto_parser, send_msg."""

    def __init__(self, switch: FakeSwitch, deliver: Deliver, on_close: Callable[[Any], object] | None) -> None:
        super().__init__(ofp.OFP_VERSION)
        self.id: int | None = switch.dpid  # os-ken's is None until the features reply
        self.switch = switch
        self.is_active = True
        self._deliver = deliver
        self._on_close = on_close
        self._bundles: dict[int, tuple[int, list]] = {}  # bundle id -> (flags, flow mods); per connection
        self._handlers = {
            ofp.OFPT_EXPERIMENTER: self._experimenter,
            ofp.OFPT_METER_MOD: self._meter_mod,
            ofp.OFPT_GROUP_MOD: self._group_mod,
            ofp.OFPT_FLOW_MOD: self._flow_mod,
            ofp.OFPT_BARRIER_REQUEST: lambda xid, _buf: self._reply(xid, ofp.OFPT_BARRIER_REPLY, b""),
            ofp.OFPT_ECHO_REQUEST: lambda xid, buf: self._reply(xid, ofp.OFPT_ECHO_REPLY, buf[ofp.OFP_HEADER_SIZE :]),
            ofp.OFPT_MULTIPART_REQUEST: self._multipart,
        }

    def send_msg(self, msg) -> bool:
        msg.serialize()
        return self.send(bytes(msg.buf))

    def send(self, buf: bytes) -> bool:
        """Like os-ken's Datapath.send: any number of back-to-back messages."""
        if not self.is_active:
            return False  # as os-ken's: the connection is gone
        while buf:
            _, msg_type, length, xid = ofproto_parser.header(buf)
            message, buf = buf[:length], buf[length:]
            self.switch.received.append(message_name(message))
            if self.switch.hang_up:
                self.switch.hang_up = False
                self.close()
                return True  # os-ken had queued it
            if msg_type not in self._handlers:
                raise NotImplementedError(f"fake switch: message type {msg_type}")
            self._handlers[msg_type](xid, message)
        return True

    def close(self) -> None:
        if self.is_active:
            self.is_active = False
            self._bundles.clear()
            if self._on_close is not None:
                self._on_close(self)

    # --- replies --------------------------------------------------------------
    def _reply(self, xid: int, msg_type: int, body: bytes) -> None:
        """A reply os-ken cannot serialize (multipart, barrier), packed by hand."""
        header = struct.pack(ofp.OFP_HEADER_PACK_STR, ofp.OFP_VERSION, msg_type, ofp.OFP_HEADER_SIZE + len(body), xid)
        self._send_reply(header + body)

    def _reply_msg(self, xid: int, msg) -> None:
        msg.set_xid(xid)
        msg.serialize()
        self._send_reply(bytes(msg.buf))

    def _send_reply(self, buf: bytes) -> None:
        reply = parse(self, buf)
        self.switch.replies.append(reply)
        if not self.switch.drop_replies:
            self._deliver(self.switch.dpid, reply)

    def _error(self, xid: int, type_: int, code: int, request: bytes) -> None:
        self._reply_msg(xid, parser.OFPErrorMsg(self, type_, code, request[:64]))

    def _onf_error(self, xid: int, exp_type: int) -> None:
        experimenter = ofproto_common.ONF_EXPERIMENTER_ID
        self._reply_msg(
            xid,
            parser.OFPErrorMsg(self, ofp.OFPET_EXPERIMENTER, None, b"", exp_type=exp_type, experimenter=experimenter),
        )

    # --- requests -------------------------------------------------------------
    def _multipart(self, xid: int, buf: bytes) -> None:
        stats_type, _ = struct.unpack_from(ofp.OFP_MULTIPART_REQUEST_PACK_STR, buf, ofp.OFP_HEADER_SIZE)
        at = ofp.OFP_MULTIPART_REQUEST_SIZE
        if stats_type in (ofp.OFPMP_FLOW, ofp.OFPMP_AGGREGATE):
            table_id, out_port, out_group, cookie, mask = struct.unpack_from(
                ofp.OFP_FLOW_STATS_REQUEST_0_PACK_STR, buf, at
            )
            if (out_port, out_group) != (ofp.OFPP_ANY, ofp.OFPG_ANY):
                raise NotImplementedError("fake switch: flow stats filtered by out_port/out_group")
            want = set(parser.OFPMatch.parser(buf, at + ofp.OFP_FLOW_STATS_REQUEST_0_SIZE).items())
            items = [
                _flow_stats(mod)
                for (table, _, match), mod in self.switch.flows.items()
                if table_id in (ofp.OFPTT_ALL, table) and mod.cookie & mask == cookie & mask and want <= set(match)
            ]
            if stats_type == ofp.OFPMP_AGGREGATE:  # one body: packets, bytes, flows
                items = [struct.pack(ofp.OFP_AGGREGATE_STATS_REPLY_PACK_STR, 0, 0, len(items))]
        elif stats_type == ofp.OFPMP_METER_CONFIG:
            (meter_id,) = struct.unpack_from(ofp.OFP_METER_MULTIPART_REQUEST_PACK_STR, buf, at)
            items = [_meter_config(m) for i, m in self.switch.meters.items() if meter_id in (ofp.OFPM_ALL, i)]
        else:
            raise NotImplementedError(f"fake switch: multipart type {stats_type}")
        size = self.switch.stats_per_reply
        chunks = [items[i : i + size] for i in range(0, len(items), size)] or [[]]
        for n, chunk in enumerate(chunks):
            flags = ofp.OFPMPF_REPLY_MORE if n < len(chunks) - 1 else 0
            body = struct.pack(ofp.OFP_MULTIPART_REPLY_PACK_STR, stats_type, flags) + b"".join(chunk)
            self._reply(xid, ofp.OFPT_MULTIPART_REPLY, body)

    def _meter_mod(self, xid: int, buf: bytes) -> None:
        mod, meters = decode_meter_mod(buf), self.switch.meters
        if mod.command == ofp.OFPMC_ADD and mod.meter_id in meters:
            return self._error(xid, ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_METER_EXISTS, buf)
        if mod.command == ofp.OFPMC_MODIFY and mod.meter_id not in meters:
            return self._error(xid, ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_UNKNOWN_METER, buf)
        if mod.command == ofp.OFPMC_DELETE:
            meters.pop(mod.meter_id, None)
            self.switch.flows = {k: f for k, f in self.switch.flows.items() if mod.meter_id not in _meter_ids(f)}
        else:
            meters[mod.meter_id] = mod
        self.switch.journal.append(Applied(self.switch.name, _METER_KINDS[mod.command], mod))

    def _group_mod(self, xid: int, buf: bytes) -> None:
        mod = decode_group_mod(buf)
        if mod.command != ofp.OFPGC_ADD:
            raise NotImplementedError(f"fake switch: group mod command {mod.command}")
        if mod.group_id in self.switch.groups:
            return self._error(xid, ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_GROUP_EXISTS, buf)
        self.switch.groups[mod.group_id] = mod

    def _flow_mod(self, xid: int, buf: bytes) -> None:
        """A flow mod outside a bundle, applied at once (how the underlay is loaded)."""
        mod = parse(self, buf)
        error = self._apply(self.switch.flows, mod)
        if error is not None:
            return self._error(xid, error[0], error[1], buf)
        self.switch.journal.append(Applied(self.switch.name, _FLOW_KINDS[mod.command], mod))

    def _experimenter(self, xid: int, buf: bytes) -> None:
        msg = parse(self, buf)
        if isinstance(msg, parser.ONFBundleCtrlMsg):
            self._bundle_ctrl(xid, msg)
        elif (msg.experimenter, msg.exp_type) == (ofproto_common.ONF_EXPERIMENTER_ID, ofp.ONF_ET_BUNDLE_ADD_MESSAGE):
            bundle_id, _flags = struct.unpack_from(ofp.ONF_BUNDLE_ADD_MSG_PACK_STR, msg.data)
            inner = parse(self, bytes(msg.data[ofp.ONF_BUNDLE_ADD_MSG_SIZE :]))
            if not isinstance(inner, parser.OFPFlowMod):
                raise NotImplementedError(f"fake switch: {type(inner).__name__} in a bundle")
            if bundle_id not in self._bundles:
                self._onf_error(xid, ofp.ONFERR_ET_BAD_ID)
            elif inner.xid != xid:
                self._onf_error(xid, ofp.ONFERR_ET_MSG_BAD_XID)
            else:
                self._bundles[bundle_id][1].append(inner)
        else:
            raise NotImplementedError(f"fake switch: experimenter message {msg.experimenter:#x}/{msg.exp_type}")

    def _bundle_ctrl(self, xid: int, msg) -> None:
        if msg.type == ofp.ONF_BCT_OPEN_REQUEST:
            if self.switch.out_of_bundles or msg.bundle_id in self._bundles:
                exp_type = ofp.ONFERR_ET_OUT_OF_BUNDLES if self.switch.out_of_bundles else ofp.ONFERR_ET_BUNDLE_EXIST
                return self._onf_error(xid, exp_type)
            self._bundles[msg.bundle_id] = (msg.flags, [])
            return self._reply_msg(
                xid, parser.ONFBundleCtrlMsg(self, msg.bundle_id, ofp.ONF_BCT_OPEN_REPLY, msg.flags, [])
            )
        if msg.type != ofp.ONF_BCT_COMMIT_REQUEST:
            raise NotImplementedError(f"fake switch: bundle control type {msg.type}")
        if msg.bundle_id not in self._bundles:
            return self._onf_error(xid, ofp.ONFERR_ET_BAD_ID)
        flags, mods = self._bundles.pop(msg.bundle_id)  # discarded whatever the outcome
        if flags != msg.flags:
            return self._onf_error(xid, ofp.ONFERR_ET_BAD_FLAGS)
        refuse, self.switch.refuse_in_next_bundle = self.switch.refuse_in_next_bundle, None
        flows = dict(self.switch.flows)
        for n, mod in enumerate(mods):
            error = (ofp.OFPET_FLOW_MOD_FAILED, ofp.OFPFMFC_EPERM) if n == refuse else self._apply(flows, mod)
            if error is not None:
                self._error(mod.xid, error[0], error[1], bytes(mod.buf))
                return self._onf_error(xid, ofp.ONFERR_ET_FAILED)
        self.switch.flows = flows
        self.switch.journal += [Applied(self.switch.name, _FLOW_KINDS[m.command], m) for m in mods]
        self._reply_msg(xid, parser.ONFBundleCtrlMsg(self, msg.bundle_id, ofp.ONF_BCT_COMMIT_REPLY, flags, []))

    def _apply(self, flows: dict[FlowKey, Any], mod) -> tuple[int, int] | None:
        """Applies one flow mod to `flows`; an OpenFlow (type, code) if the switch refuses it."""
        key = flow_key(mod)
        if mod.command == ofp.OFPFC_ADD:
            if any(i not in self.switch.meters for i in _meter_ids(mod)):
                return ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_UNKNOWN_METER
            if any(i not in self.switch.groups for i in _group_ids(mod)):
                return ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_OUT_GROUP
            flows[key] = mod  # same (table, priority, match): replaced in place
        elif mod.command == ofp.OFPFC_DELETE_STRICT:
            if (mod.out_port, mod.out_group) != (ofp.OFPP_ANY, ofp.OFPG_ANY):
                raise NotImplementedError("fake switch: delete filtered by out_port/out_group")
            old = flows.get(key)
            if old is not None and old.cookie & mod.cookie_mask == mod.cookie & mod.cookie_mask:
                del flows[key]
        else:
            raise NotImplementedError(f"fake switch: flow mod command {mod.command}")
        return None


def _meter_ids(mod) -> set[int]:
    return {i.meter_id for i in mod.instructions if isinstance(i, parser.OFPInstructionMeter)}


def _group_ids(mod) -> set[int]:
    return {
        a.group_id
        for i in mod.instructions
        if isinstance(i, parser.OFPInstructionActions)
        for a in i.actions
        if isinstance(a, parser.OFPActionGroup)
    }
