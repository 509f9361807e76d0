"""Request/reply over one OpenFlow connection: dump the overlay, commit a bundle.

os-ken delivers replies as events on its app thread; a `Call` turns them
back into a blocking answer for the reconciler thread, with a timeout, since
os-ken's own send_request has none. A dump that times out or errors raises:
it is never mistaken for an empty table (an empty "dump" would make the
reconciler reinstall, or worse, believe nothing is there to delete).
"""

from __future__ import annotations

import functools
import itertools
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.errors import RailyardError
from controller.southbound import ofcodec, wire
from controller.southbound.overlay import EntryKey, OverlayEntry, OverlayMeter, is_railyard_meter

if TYPE_CHECKING:  # os-ken's controller module imports half of os-ken; annotations only
    from os_ken.controller.controller import Datapath
    from os_ken.ofproto.ofproto_parser import MsgBase


class SwitchError(RailyardError):
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
    replies: queue.Queue[MsgBase | None]  # None: the switch went away


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

    def deliver(self, dpid: int, msg: MsgBase) -> bool:
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


class Exchange:
    """Messages in flight on one connection, answered once the switch replies
    to the last of them (a barrier, a bundle commit). Switches process a
    connection's messages in order, so nothing waits between them: a bundle
    goes out as open, adds and commit in one write, and many switches'
    exchanges can be in flight at once. Any error the switch sends before
    that last reply makes the exchange fail with it."""

    def __init__(
        self, session: SwitchSession, call: Call, last_xid: int, what: str, answers: Callable[[Any], bool]
    ) -> None:
        self._session = session
        self._call = call
        self._last_xid = last_xid
        self.what = what
        self._answers = answers  # is this reply the answer the last message asks for?
        self._deadline = time.monotonic() + session.timeout_s

    def result(self) -> Any:
        """The reply to the last message (an os-ken message); raises SwitchError,
        UnexpectedReply if that reply is not the answer the message asks for."""
        session, refusal = self._session, None
        try:
            while True:
                msg = session.next_reply(self._call, self.what, self._deadline)
                if isinstance(msg, parser.OFPErrorMsg):
                    refusal = refusal or msg
                if msg.xid == self._last_xid:
                    break
        finally:
            session.calls.close(session.dpid, self._call)
        if refusal is not None:
            raise SwitchRefused(session.name, self.what, refusal.type, ofcodec.error_code(refusal))
        if not self._answers(msg):
            raise UnexpectedReply(session.name, f"unexpected reply to {self.what}: {type(msg).__name__}")
        return msg


class SwitchSession:
    def __init__(self, name: str, datapath: Datapath, calls: CallTable, timeout_s: float) -> None:
        self.name = name
        self.datapath = datapath
        self.calls = calls
        self.timeout_s = timeout_s
        self.role: tuple[bool, int] | None = None  # (MASTER?, generation) the switch granted this connection

    @property
    def dpid(self) -> int:
        return int(self.datapath.id)

    def _encode(self, msg: MsgBase, xid: int) -> bytes:
        msg.set_xid(xid)
        msg.serialize()
        return bytes(msg.buf)

    def _send(self, buf: bytes) -> None:
        if not self.datapath.send(buf):
            raise SwitchDisconnected(self.name, "connection closed")

    def next_reply(self, call: Call, what: str, deadline: float) -> MsgBase:
        try:
            msg = call.replies.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise SwitchTimeout(self.name, f"no reply to {what} within {self.timeout_s:g} s") from None
        if msg is None:
            raise SwitchDisconnected(self.name, f"disconnected during {what}")
        return msg

    def _exchange(
        self, messages: Sequence[Callable[[int], bytes]], what: str, answers: Callable[[Any], bool]
    ) -> Exchange:
        """Sends messages in one write, each built with an xid of its own."""
        xids = [self.calls.next_xid() for _ in messages]
        call = self.calls.open(self.dpid, xids)
        try:
            self._send(b"".join(build(xid) for build, xid in zip(messages, xids)))
        except SwitchError:
            self.calls.close(self.dpid, call)
            raise
        return Exchange(self, call, xids[-1], what, answers)

    def _stamped(self, msg: MsgBase) -> Callable[[int], bytes]:
        return functools.partial(wire.with_xid, self._encode(msg, 0))

    def start_dump(self, request: MsgBase, what: str) -> Dump:
        xid = self.calls.next_xid()
        call = self.calls.open(self.dpid, [xid])
        try:
            self._send(self._encode(request, xid))
        except SwitchError:
            self.calls.close(self.dpid, call)
            raise
        return Dump(self, call, what)

    def echo(self) -> None:
        """Returns once the switch answers an echo on this connection; raises
        (SwitchTimeout, SwitchDisconnected) if it does not."""
        echo = self._stamped(parser.OFPEchoRequest(self.datapath, data=b"railyard"))
        self._exchange([echo], "echo", lambda reply: isinstance(reply, parser.OFPEchoReply)).result()

    def start_role(self, master: bool, generation: int) -> Exchange:
        """Claims this connection's role: MASTER (the one controller whose
        changes the switch takes) or SLAVE. The switch refuses a generation
        older than one it has seen (OFPRRFC_STALE): a deposed leader's claim."""
        role = ofp.OFPCR_ROLE_MASTER if master else ofp.OFPCR_ROLE_SLAVE
        request = self._stamped(parser.OFPRoleRequest(self.datapath, role, generation))
        return self._exchange([request], "role request", lambda reply: isinstance(reply, parser.OFPRoleReply))

    def start_overlay_dump(self) -> Dump:
        return self.start_dump(ofcodec.overlay_dump_request(self.datapath), "overlay dump")

    def start_meter_dump(self) -> Dump:
        return self.start_dump(ofcodec.meter_dump_request(self.datapath), "meter dump")

    def start_underlay_dump(self) -> Dump:
        return self.start_dump(ofcodec.underlay_dump_request(self.datapath), "underlay dump")

    def start_group_dump(self) -> Dump:
        return self.start_dump(ofcodec.group_dump_request(self.datapath), "group dump")

    def start_overlay_count(self) -> Dump:
        return self.start_dump(ofcodec.overlay_count_request(self.datapath), "overlay count")

    def dump_overlay(self) -> dict[EntryKey, OverlayEntry]:
        return overlay_table(self.name, self.start_overlay_dump().result())

    def dump_meters(self) -> dict[int, OverlayMeter]:
        return meter_table(self.name, self.start_meter_dump().result())

    def start_confirmed(self, mods: list[MsgBase], what: str) -> Exchange:
        """Messages that cannot go in a bundle (meter mods), then a barrier:
        done once the switch has processed them all, failed if it refused any
        (its error arrives before the barrier reply)."""
        messages = [self._stamped(m) for m in (*mods, parser.OFPBarrierRequest(self.datapath))]
        return self._exchange(messages, what, lambda reply: isinstance(reply, parser.OFPBarrierReply))

    def send_confirmed(self, mods: list[MsgBase], what: str) -> None:
        if mods:
            self.start_confirmed(mods, what).result()

    def start_bundle(self, flow_mods: list[bytes]) -> Exchange:
        """Open, add, commit (atomic, ordered) in one write; the exchange is
        done at the commit reply. On any error the switch discards the
        bundle: nothing of it applies. `flow_mods` are wire-encoded, xid 0."""
        bundle_id = self.calls.next_xid()
        messages = [
            functools.partial(wire.bundle_ctrl, bundle_id, ofp.ONF_BCT_OPEN_REQUEST),
            *(functools.partial(wire.bundle_add, bundle_id, mod) for mod in flow_mods),
            functools.partial(wire.bundle_ctrl, bundle_id, ofp.ONF_BCT_COMMIT_REQUEST),
        ]
        return self._exchange(messages, "bundle", _is_commit_reply)

    def commit_bundle(self, flow_mods: list[bytes]) -> None:
        if flow_mods:
            self.start_bundle(flow_mods).result()


def _is_commit_reply(reply: MsgBase) -> bool:
    return isinstance(reply, parser.ONFBundleCtrlMsg) and reply.type == ofp.ONF_BCT_COMMIT_REPLY


class Dump:
    """A multipart request in flight; `result()` collects every body item of
    its (possibly multi-message) reply."""

    def __init__(self, session: SwitchSession, call: Call, what: str) -> None:
        self._session = session
        self._call = call
        self.what = what
        self._deadline = time.monotonic() + session.timeout_s

    def result(self) -> list[ofcodec.Stats]:
        session, items = self._session, []
        try:
            while True:
                reply = session.next_reply(self._call, self.what, self._deadline)
                if isinstance(reply, parser.OFPErrorMsg):
                    raise SwitchRefused(session.name, self.what, reply.type, ofcodec.error_code(reply))
                if isinstance(reply.body, list):
                    items += reply.body
                else:
                    items.append(reply.body)  # aggregate stats: one body, not a list
                if not reply.flags & ofp.OFPMPF_REPLY_MORE:
                    return items
        finally:
            session.calls.close(session.dpid, self._call)


def overlay_table(switch: str, stats: list[ofcodec.Stats]) -> dict[EntryKey, OverlayEntry]:
    entries = (ofcodec.entry_from_stats(switch, s) for s in stats)
    return {entry.key: entry for entry in entries}


def meter_table(switch: str, stats: list[ofcodec.Stats]) -> dict[int, OverlayMeter]:
    """Railyard's meters only (its id range)."""
    meters = (ofcodec.meter_from_stats(switch, s) for s in stats)
    return {m.meter_id: m for m in meters if is_railyard_meter(m.meter_id)}
