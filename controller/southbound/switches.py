"""Request/reply over one OpenFlow connection: dump the overlay, commit a bundle.

os-ken delivers replies as events on its app thread; a `Call` turns them
back into a blocking answer for the reconciler thread, with a timeout, since
os-ken's own send_request has none. A dump that times out or errors raises:
it is never mistaken for an empty table (an empty "dump" would make the
reconciler reinstall, or worse, believe nothing is there to delete).
"""

from __future__ import annotations

import itertools
import queue
import threading
from dataclasses import dataclass

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.southbound import ofcodec
from controller.southbound.overlay import EntryKey, OverlayEntry, OverlayMeter, is_railyard_meter


class SwitchError(Exception):
    """A switch did not answer, refused a message, or went away. `reason` is
    the metric label that tells the kinds apart."""

    reason = "error"

    def __init__(self, switch: str, detail: str) -> None:
        super().__init__(f"{switch}: {detail}")
        self.switch = switch


class SwitchTimeout(SwitchError):
    """No reply within the reply timeout: the switch may be overloaded or hung."""

    reason = "timeout"


class SwitchDisconnected(SwitchError):
    """The connection closed before or while we waited."""

    reason = "disconnected"


class SwitchRefused(SwitchError):
    """The switch answered with an OpenFlow error message."""

    reason = "refused"

    def __init__(self, switch: str, what: str, err_type: int, code: int) -> None:
        super().__init__(switch, f"{what} refused: error type {err_type} code {code}")
        self.err_type = err_type
        self.code = code


class UnexpectedReply(SwitchError):
    """A reply of the wrong kind: a protocol bug on one side."""

    reason = "unexpected_reply"


SWITCH_ERROR_REASONS = tuple(
    kind.reason for kind in (SwitchTimeout, SwitchDisconnected, SwitchRefused, UnexpectedReply)
)


@dataclass(eq=False)  # identity semantics: calls are collected in sets
class Call:
    """Replies for a set of xids, fed by the app thread."""

    xids: frozenset[int]
    replies: queue.Queue


class CallTable:
    """xid -> Call. Our xids come from one counter in a range far from os-ken's
    own (random start), so replies to os-ken's internal requests never land here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[tuple[int, int], Call] = {}
        self._xids = itertools.count(0x52590000)

    def next_xid(self) -> int:
        with self._lock:
            return next(self._xids) & 0xFFFFFFFF

    def open(self, dpid: int, xids: list[int]) -> Call:
        call = Call(frozenset(xids), queue.Queue())
        with self._lock:
            for xid in xids:
                self._calls[(dpid, xid)] = call
        return call

    def close(self, dpid: int, call: Call) -> None:
        with self._lock:
            for xid in call.xids:
                self._calls.pop((dpid, xid), None)

    def deliver(self, dpid: int, msg) -> bool:
        with self._lock:
            call = self._calls.get((dpid, msg.xid))
        if call is None:
            return False
        call.replies.put(msg)
        return True

    def fail_switch(self, dpid: int) -> None:
        """The connection died: wake every waiter on it."""
        with self._lock:
            calls = {c for (d, _), c in self._calls.items() if d == dpid}
        for call in calls:
            call.replies.put(None)


class SwitchSession:
    def __init__(self, name: str, datapath, calls: CallTable, timeout_s: float) -> None:
        self.name = name
        self.datapath = datapath
        self._calls = calls
        self._timeout = timeout_s

    @property
    def dpid(self) -> int:
        return self.datapath.id

    def _send(self, msg, xid: int) -> None:
        msg.set_xid(xid)
        if not self.datapath.send_msg(msg):
            raise SwitchDisconnected(self.name, "connection closed")

    def _wait(self, call: Call, what: str):
        try:
            msg = call.replies.get(timeout=self._timeout)
        except queue.Empty:
            raise SwitchTimeout(self.name, f"no reply to {what} within {self._timeout:g} s") from None
        if msg is None:
            raise SwitchDisconnected(self.name, f"disconnected during {what}")
        if isinstance(msg, parser.OFPErrorMsg):
            raise SwitchRefused(self.name, what, msg.type, ofcodec.error_code(msg))
        return msg

    def _multipart(self, request, what: str) -> list:
        """Every body item of a (possibly multi-message) multipart reply."""
        xid = self._calls.next_xid()
        call = self._calls.open(self.dpid, [xid])
        try:
            self._send(request, xid)
            items: list = []
            while True:
                reply = self._wait(call, what)
                items += reply.body
                if not reply.flags & ofp.OFPMPF_REPLY_MORE:
                    return items
        finally:
            self._calls.close(self.dpid, call)

    def echo(self) -> None:
        """Returns once the switch answers an echo on this connection; raises
        (SwitchTimeout, SwitchDisconnected) if it does not."""
        xid = self._calls.next_xid()
        call = self._calls.open(self.dpid, [xid])
        try:
            self._send(parser.OFPEchoRequest(self.datapath, data=b"railyard"), xid)
            if not isinstance(self._wait(call, "echo"), parser.OFPEchoReply):
                raise UnexpectedReply(self.name, "unexpected reply to an echo")
        finally:
            self._calls.close(self.dpid, call)

    def dump_overlay(self) -> dict[EntryKey, OverlayEntry]:
        entries = (
            ofcodec.entry_from_stats(self.name, stats)
            for stats in self._multipart(ofcodec.overlay_dump_request(self.datapath), "overlay dump")
        )
        return {entry.key: entry for entry in entries}

    def dump_meters(self) -> dict[int, OverlayMeter]:
        """Railyard's meters only (its id range)."""
        meters = (
            ofcodec.meter_from_stats(self.name, stats)
            for stats in self._multipart(ofcodec.meter_dump_request(self.datapath), "meter dump")
        )
        return {m.meter_id: m for m in meters if is_railyard_meter(m.meter_id)}

    def send_confirmed(self, mods: list, what: str) -> None:
        """Messages that cannot go in a bundle (meter mods), followed by a
        barrier: returns once the switch has processed them all, raises if it
        refused any (its error arrives before the barrier reply)."""
        if not mods:
            return
        xids = [self._calls.next_xid() for _ in range(len(mods) + 1)]
        call = self._calls.open(self.dpid, xids)
        try:
            for xid, mod in zip(xids, mods):
                self._send(mod, xid)
            self._send(parser.OFPBarrierRequest(self.datapath), xids[-1])
            msg = self._wait(call, what)
            if not isinstance(msg, parser.OFPBarrierReply):
                raise UnexpectedReply(self.name, f"unexpected reply to {what}: {type(msg).__name__}")
        finally:
            self._calls.close(self.dpid, call)

    def commit_bundle(self, flow_mods: list) -> None:
        """Open, add, commit atomically; returns only after the commit reply.
        On any error the switch discards the bundle: nothing of it applies."""
        if not flow_mods:
            return
        dp = self.datapath
        bundle_id = self._calls.next_xid()
        xids = [self._calls.next_xid() for _ in range(len(flow_mods) + 2)]
        call = self._calls.open(self.dpid, xids)
        flags = ofp.ONF_BF_ATOMIC | ofp.ONF_BF_ORDERED
        try:
            self._send(parser.ONFBundleCtrlMsg(dp, bundle_id, ofp.ONF_BCT_OPEN_REQUEST, flags, []), xids[0])
            self._expect_ctrl(call, ofp.ONF_BCT_OPEN_REPLY, "bundle open")
            for xid, mod in zip(xids[1:], flow_mods):
                self._send(parser.ONFBundleAddMsg(dp, bundle_id, flags, mod, []), xid)
            self._send(parser.ONFBundleCtrlMsg(dp, bundle_id, ofp.ONF_BCT_COMMIT_REQUEST, flags, []), xids[-1])
            # A refused add is reported with the add's xid before the commit
            # reply; the commit itself then fails too. Either way: raise.
            self._expect_ctrl(call, ofp.ONF_BCT_COMMIT_REPLY, "bundle commit")
        finally:
            self._calls.close(self.dpid, call)

    def _expect_ctrl(self, call: Call, reply_type: int, what: str) -> None:
        msg = self._wait(call, what)
        if not isinstance(msg, parser.ONFBundleCtrlMsg) or msg.type != reply_type:
            raise UnexpectedReply(self.name, f"unexpected reply to {what}: {type(msg).__name__}")
