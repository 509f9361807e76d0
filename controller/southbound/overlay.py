"""Desired overlay: a pure function of (fabric, intent) -> entries per switch.

An overlay entry steers matching packets onto one next hop where the
underlay would have hashed over several. Entries are only placed where the
switch has an ECMP choice, so removing every overlay entry (or losing the
controller) falls back to the underlay: the overlay can mis-steer but never
black-hole.

Entries are canonical (sorted match fields, action strings) so that what the
switch reports and what we want compare with `==`.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from controller.fabric import Endpoint, Fabric, NicId
from controller.fabric import addressing as ad
from controller.intent.model import FlowMatch, FlowPin, Intent, directions
from controller.te.engine import Meter as TeMeter
from controller.te.engine import Move as TeMove
from controller.te.jobs import Job
from controller.te.view import FlowKey, reverse_key

# Cookie layout (64 bits): | 'RY' prefix (16) | owner kind (8) | owner id (40) |
# Deletes and dumps are always scoped by COOKIE_PREFIX_MASK, so entries of the
# underlay (cookie 0) or of anyone else are never seen or touched.
COOKIE_PREFIX = 0x5259 << 48
COOKIE_PREFIX_MASK = 0xFFFF << 48
COOKIE_ALL = (1 << 64) - 1
# The overlay's kinds have bit 2 of the owner kind clear; the underlay the
# controller installs (--underlay) has it set. An overlay dump masks that bit
# too, so the overlay and the underlay never see, or delete, each other's entries.
OWNER_KINDS = {"pin": 1, "job": 2, "te": 3, "underlay": 4}
OVERLAY_COOKIE_MASK = COOKIE_PREFIX_MASK | 4 << 40
OWNER_KIND_MASK = COOKIE_PREFIX_MASK | 0xFF << 40

# Above every underlay priority (max 3000). A 5-tuple pin beats a NIC-pair
# pin; a job's flows are NIC pairs at PRIORITY_PIN_PAIR too.
PRIORITY_PIN_PAIR = 20000
PRIORITY_PIN_FLOW = 20100
# A placed job's QP, on the source port placement named it, beats its pair's
# hash; a TE move may still rebalance it.
PRIORITY_JOB_QP = 20025
# An adaptive TE move (one 5-tuple) may rebalance a placed job's flow among
# its spines, so it sits above NIC-pair entries; it never touches a pinned
# pair (the engine is told those), and a 5-tuple pin still beats it.
PRIORITY_TE_MOVE = 20050
# A QP's source port is RoCEv2's (UDP) on a fabric, TCP's where TCP stands in
# for it (the emulation, iWARP): a QP's pin matches either.
QP_PROTOCOLS = ("udp", "tcp")

IPV4 = 0x0800
IP_PROTO = {"tcp": 6, "udp": 17}

Match = tuple[tuple[str, int | str], ...]

# Railyard's OpenFlow meter ids (OVS allows up to 262144 per bridge). Only ids
# in this range are ever dumped, changed or deleted: meters of anyone else
# on the switch are left alone.
METER_ID_BASE = 200_000
METER_ID_SPAN = 4096
# A meter's burst: 20 ms at its rate, and never under four jumbo frames, so a
# policed flow is not cut below its rate by its own packet sizes.
METER_BURST_S = 0.02
METER_MIN_BURST_KBITS = 4 * 9000 * 8 // 1000


@dataclass(frozen=True)
class OverlayMeter:
    """A drop meter as the switch reports it: rates in the switch's own units
    (the emulated rate, for an emulated fabric), in kbit/s and kbit."""

    switch: str
    meter_id: int
    rate_kbps: int
    burst_kbits: int


@dataclass(frozen=True, order=True)
class EntryKey:
    """What OpenFlow considers the identity of a flow entry in a table."""

    priority: int
    match: Match


@dataclass(frozen=True)
class OverlayEntry:
    switch: str
    priority: int
    match: Match
    actions: tuple[str, ...]
    cookie: int

    @property
    def key(self) -> EntryKey:
        return EntryKey(self.priority, self.match)


def is_railyard_meter(meter_id: int) -> bool:
    return METER_ID_BASE <= meter_id < METER_ID_BASE + METER_ID_SPAN


def owner_cookie(kind: str, owner: str) -> int:
    digest = int.from_bytes(hashlib.blake2b(owner.encode(), digest_size=5).digest(), "big")
    return COOKIE_PREFIX | OWNER_KINDS[kind] << 40 | digest


def is_railyard_cookie(cookie: int) -> bool:
    return cookie & COOKIE_PREFIX_MASK == COOKIE_PREFIX


def canonical_match(match: FlowMatch) -> Match:
    fields: dict[str, int | str] = {
        "eth_type": IPV4,
        "ipv4_src": ad.nic_ip(match.src),
        "ipv4_dst": ad.nic_ip(match.dst),
    }
    if match.protocol:
        fields["ip_proto"] = IP_PROTO[match.protocol]
        if match.src_port:
            fields[f"{match.protocol}_src"] = match.src_port
        if match.dst_port:
            fields[f"{match.protocol}_dst"] = match.dst_port
    return tuple(sorted(fields.items()))


@functools.lru_cache(maxsize=1 << 16)
def _steering_hops(fabric: Fabric, src: NicId, dst: NicId, spine: str) -> tuple[Endpoint, ...]:
    """A NIC pair's flows (a job's, an elephant's pins, its ACKs) share their
    hops: a bounded cache over passes, where the fabric keeps none per pair."""
    return fabric.steering_hops(src, dst, spine)


def steering_entries(
    fabric: Fabric, match: FlowMatch, spine: str, cookie: int, priority: int | None = None
) -> list[OverlayEntry]:
    """Entries that make `match` cross `spine`: one at each switch where the
    underlay would have hashed (a spine's or last hop's single route needs none)."""
    hops = _steering_hops(fabric, match.src, match.dst, spine)
    if not hops:
        raise ValueError(f"{spine} is on no equal-cost path of {match.describe()}")
    if priority is None:
        priority = PRIORITY_PIN_FLOW if match.src_port or match.dst_port else PRIORITY_PIN_PAIR
    canonical = canonical_match(match)
    return [OverlayEntry(hop.node, priority, canonical, ("dec_ttl", f"output:{hop.port}"), cookie) for hop in hops]


def pin_entries(fabric: Fabric, pin: FlowPin) -> list[OverlayEntry]:
    cookie = owner_cookie("pin", pin.name)
    return [e for m in directions(pin) for e in steering_entries(fabric, m, pin.spine, cookie)]


def job_entries(fabric: Fabric, job: Job) -> list[OverlayEntry]:
    cookie = owner_cookie("job", job.job_id)
    pairs = [
        entry
        for (src, dst), via in job.pinned.items()
        for entry in steering_entries(fabric, FlowMatch(src, dst), via, cookie)
    ]
    qps = [
        entry
        for (src, dst, port), via in job.pinned_qps.items()
        for protocol in QP_PROTOCOLS
        for entry in steering_entries(fabric, FlowMatch(src, dst, protocol, port), via, cookie, PRIORITY_JOB_QP)
    ]
    return pairs + qps


MoveIdentity = tuple[FlowKey, NicId, NicId, str]  # what a move's entries are made of: flow, ends, spine
MoveEntries = tuple[tuple[OverlayEntry, ...], tuple[OverlayEntry, ...]]


@dataclass
class OverlayMemo:
    """The last pass's derived entries, reused while their inputs are the
    same: jobs that are the very same (immutable) object, moves with the same
    flow and spine. A pass re-derives only what changed, which on a large
    fabric is a few jobs and moves among thousands."""

    jobs: dict[str, tuple[Job, list[OverlayEntry]]] = field(default_factory=dict)
    moves: dict[MoveIdentity, MoveEntries] = field(default_factory=dict)


def _te_cookie(key: FlowKey, reverse: bool = False) -> int:
    return owner_cookie("te", ("rev|" if reverse else "") + "|".join(map(str, key)))


def meter_ids(fabric: Fabric, meters: Iterable[TeMeter]) -> dict[FlowKey, tuple[str, int]]:
    """Flow key -> (ingress leaf, meter id). An id is a hash of the flow into
    Railyard's range, probed linearly in key order on a clash: the same set of
    meters always gets the same ids, and one more meter rarely renumbers any."""
    taken: dict[str, set[int]] = {}
    out: dict[FlowKey, tuple[str, int]] = {}
    for meter in sorted(meters, key=lambda m: m.key):
        leaf = fabric.attachment(meter.src).node
        used = taken.setdefault(leaf, set())
        if len(used) >= METER_ID_SPAN:
            continue  # more incast senders on one leaf than ids: the rest go unmetered
        slot = int.from_bytes(hashlib.blake2b("|".join(map(str, meter.key)).encode(), digest_size=4).digest(), "big")
        while METER_ID_BASE + slot % METER_ID_SPAN in used:
            slot += 1
        used.add(METER_ID_BASE + slot % METER_ID_SPAN)
        out[meter.key] = (leaf, METER_ID_BASE + slot % METER_ID_SPAN)
    return out


def switch_meter(fabric: Fabric, meter: TeMeter, switch: str, meter_id: int) -> OverlayMeter:
    # The controller thinks in the fabric's real rates; the switch polices in
    # its own (for the emulation, the same fraction of the emulated link).
    link = fabric.access_link(meter.src)
    kbps = max(int(meter.rate_bps * link.emulated_bps / link.capacity_bps / 1000), 1)
    return OverlayMeter(switch, meter_id, kbps, max(int(kbps * METER_BURST_S), METER_MIN_BURST_KBITS))


def desired_meters(fabric: Fabric, meters: Iterable[TeMeter]) -> dict[str, dict[int, OverlayMeter]]:
    meters = list(meters)
    out: dict[str, dict[int, OverlayMeter]] = {name: {} for name in fabric.switches}
    by_key = {m.key: m for m in meters}
    for key, (switch, meter_id) in meter_ids(fabric, meters).items():
        out[switch][meter_id] = switch_meter(fabric, by_key[key], switch, meter_id)
    return out


def _move_entries(fabric: Fabric, key: FlowKey, src: NicId, dst: NicId, via: str) -> MoveEntries:
    """A move's entries, and those steering a TCP elephant's ACKs back the same way."""
    _, _, protocol, sport, dport = key
    match = FlowMatch(src, dst, protocol, sport, dport)
    entries = tuple(steering_entries(fabric, match, via, _te_cookie(key), PRIORITY_TE_MOVE))
    if protocol != "tcp":
        return entries, ()
    acks = steering_entries(fabric, match.reversed(), via, _te_cookie(key, reverse=True), PRIORITY_TE_MOVE)
    return entries, tuple(acks)


def te_entries(
    fabric: Fabric,
    moves: Iterable[TeMove],
    meters: Iterable[TeMeter] = (),
    memo: dict[MoveIdentity, MoveEntries] | None = None,
) -> list[OverlayEntry]:
    """A moved elephant: its exact 5-tuple steered across the chosen spine. A
    TCP elephant's ACKs are steered back the same way (unless the reverse is
    an elephant with a move of its own): ACKs left on the uplink the data was
    moved away from queue behind the other elephant and slow the moved flow.

    A metered flow's entry at its ingress leaf also applies its meter. The
    engine moves (or pins) every metered flow that crosses spines; one that
    stays on its leaf gets an entry doing the leaf's local delivery.

    `memo`, when given, holds the entries of the moves of the last call and
    is left holding this call's."""
    moves, meters = list(moves), list(meters)
    derived: dict[MoveIdentity, MoveEntries] = {}
    moved = {m.key for m in moves}
    ids = meter_ids(fabric, meters)
    out: list[OverlayEntry] = []
    for move in moves:
        identity = (move.key, move.src, move.dst, move.via)
        found = memo.get(identity) if memo is not None else None
        entries, acks = derived[identity] = found or _move_entries(fabric, *identity)
        if move.key in ids:
            leaf, meter_id = ids[move.key]
            entries = tuple(
                replace(e, actions=(f"meter:{meter_id}", *e.actions)) if e.switch == leaf else e for e in entries
            )
        out += entries
        if reverse_key(move.key) not in moved:
            out += acks
    if memo is not None:
        memo.clear()
        memo.update(derived)
    for meter in meters:
        if meter.key in moved or meter.key not in ids or fabric.vias(meter.src, meter.dst):
            continue  # crosses spines unpinned (the engine did not know its path): nothing safe to add
        leaf, meter_id = ids[meter.key]
        _, _, protocol, sport, dport = meter.key
        meter_match = canonical_match(FlowMatch(meter.src, meter.dst, protocol, sport, dport))
        eth_src, eth_dst = ad.local_delivery_macs(meter.dst)
        out.append(
            OverlayEntry(
                leaf,
                PRIORITY_TE_MOVE,
                meter_match,
                (
                    f"meter:{meter_id}",
                    "dec_ttl",
                    f"set_field:eth_src={eth_src}",
                    f"set_field:eth_dst={eth_dst}",
                    f"output:{fabric.attachment(meter.dst).port}",
                ),
                _te_cookie(meter.key),
            )
        )
    return out


def _te_flow(entry: OverlayEntry) -> tuple[FlowKey, NicId, NicId] | None:
    """The flow a TE entry (a move's, or a metered flow's) was written for."""
    if entry.cookie >> 40 & 0xFF != OWNER_KINDS["te"] or entry.priority != PRIORITY_TE_MOVE:
        return None
    fields = dict(entry.match)
    ip_proto = fields.get("ip_proto")
    protocol = {6: "tcp", 17: "udp"}.get(ip_proto, "") if isinstance(ip_proto, int) else ""
    if not protocol or "ipv4_src" not in fields or "ipv4_dst" not in fields:
        return None
    key = (
        str(fields["ipv4_src"]),
        str(fields["ipv4_dst"]),
        protocol,
        int(fields.get(f"{protocol}_src", 0)),
        int(fields.get(f"{protocol}_dst", 0)),
    )
    if entry.cookie != _te_cookie(key):
        return None  # the ACK entry of a move: it comes back with the move itself
    try:
        return key, ad.parse_nic_address(key[0]), ad.parse_nic_address(key[1])
    except ad.AddressError:
        return None


def meter_from_entry(
    fabric: Fabric, entry: OverlayEntry, meters: Mapping[int, OverlayMeter], now: float
) -> TeMeter | None:
    """The incast meter an installed entry applies (to adopt after a restart),
    if it applies one of the switch's Railyard meters. The rate is read back
    from the meter at the middle of its kbit/s step, so that rendering the
    adopted meter gives the very meter the switch holds: no meter-mod."""
    meter_ids_used = [int(a.split(":")[1]) for a in entry.actions if a.startswith("meter:")]
    found = _te_flow(entry)
    if not meter_ids_used or found is None or meter_ids_used[0] not in meters:
        return None
    key, src, dst = found
    link = fabric.access_link(src)
    rate_bps = (meters[meter_ids_used[0]].rate_kbps + 0.5) * 1000 * link.capacity_bps / link.emulated_bps
    return TeMeter(key, src, dst, rate_bps, now)


def move_from_entry(fabric: Fabric, entry: OverlayEntry, now: float) -> TeMove | None:
    """The TE move an installed entry encodes (to adopt after a restart), if it is one."""
    found = _te_flow(entry)
    outputs = [a for a in entry.actions if a.startswith("output:")]
    if found is None or not outputs:
        return None
    key, src, dst = found
    via = fabric.peer(entry.switch, int(outputs[0].split(":")[1])).node
    if via not in fabric.switches:
        return None  # a metered flow delivered on its own leaf: no move (its meter: meter_from_entry)
    if not (fabric.has_nic(src) and fabric.has_nic(dst)) or via not in fabric.vias(src, dst):
        # An ingress leaf's entry on a path that hashes twice (across a core)
        # names only the spine; the entry one hop on, at that spine, names
        # the core, which is the move's via.
        return None
    return TeMove(key, src, dst, via, now, now)


def desired_overlay(
    fabric: Fabric,
    intent: Intent,
    memo: OverlayMemo | None = None,
    te_moves: Iterable[TeMove] = (),
    te_meters: Iterable[TeMeter] = (),
) -> dict[str, dict[EntryKey, OverlayEntry]]:
    """Every switch of the fabric appears, with an empty table if it needs nothing,
    so reconciliation also clears switches that no longer carry any pin.

    `memo`, when given, is reused and updated in place: re-deriving thousands
    of jobs' flows and elephants' moves per pass would hold the GIL the API
    needs."""
    overlay: dict[str, dict[EntryKey, OverlayEntry]] = {name: {} for name in fabric.switches}
    for job_id, job in sorted(intent.jobs.items()):
        cached = memo.jobs.get(job_id) if memo is not None else None
        if cached is not None and cached[0] is job:
            entries = cached[1]
        else:
            entries = job_entries(fabric, job)
            if memo is not None:
                memo.jobs[job_id] = (job, entries)
        for entry in entries:
            overlay[entry.switch][entry.key] = entry
    if memo is not None:
        for stale in memo.jobs.keys() - intent.jobs.keys():
            del memo.jobs[stale]
    for entry in te_entries(fabric, te_moves, te_meters, memo.moves if memo is not None else None):
        overlay[entry.switch].setdefault(entry.key, entry)
    # Operator pins last: on the same NIC pair, the operator's choice wins.
    for pin in sorted(intent.pins.values()):
        for entry in pin_entries(fabric, pin):
            # validate_pin keeps directions disjoint, so keys never collide.
            overlay[entry.switch][entry.key] = entry
    return overlay
