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

import hashlib
from dataclasses import dataclass

from controller.fabric import Fabric
from controller.fabric import addressing as ad
from controller.intent import FlowMatch, FlowPin, Intent, directions
from controller.te.jobs import Job

# Cookie layout (64 bits): | 'RY' prefix (16) | owner kind (8) | owner id (40) |
# Deletes and dumps are always scoped by COOKIE_PREFIX_MASK, so entries of the
# underlay (cookie 0) or of anyone else are never seen or touched.
COOKIE_PREFIX = 0x5259 << 48
COOKIE_PREFIX_MASK = 0xFFFF << 48
COOKIE_ALL = (1 << 64) - 1
OWNER_KINDS = {"pin": 1, "job": 2}

# Above every underlay priority (max 3000). A 5-tuple pin beats a NIC-pair pin.
PRIORITY_PIN_PAIR = 20000
PRIORITY_PIN_FLOW = 20100

IPV4 = 0x0800
IP_PROTO = {"tcp": 6, "udp": 17}

Match = tuple[tuple[str, int | str], ...]


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


def steering_entries(fabric: Fabric, match: FlowMatch, spine: str, cookie: int) -> list[OverlayEntry]:
    """Entries that make `match` cross `spine`: one at each switch where the
    underlay would have hashed (a spine's or last hop's single route needs none)."""
    hops = fabric.steering_hops(match.src, match.dst, spine)
    if not hops:
        raise ValueError(f"{spine} is on no equal-cost path of {match.describe()}")
    priority = PRIORITY_PIN_FLOW if match.src_port or match.dst_port else PRIORITY_PIN_PAIR
    canonical = canonical_match(match)
    return [OverlayEntry(hop.node, priority, canonical, ("dec_ttl", f"output:{hop.port}"), cookie) for hop in hops]


def pin_entries(fabric: Fabric, pin: FlowPin) -> list[OverlayEntry]:
    cookie = owner_cookie("pin", pin.name)
    return [e for m in directions(pin) for e in steering_entries(fabric, m, pin.spine, cookie)]


def job_entries(fabric: Fabric, job: Job) -> list[OverlayEntry]:
    cookie = owner_cookie("job", job.job_id)
    return [entry for flow in job.flows if flow.via
            for entry in steering_entries(fabric, FlowMatch(flow.src, flow.dst), flow.via, cookie)]


JobEntryMemo = dict[str, tuple[Job, list[OverlayEntry]]]


def desired_overlay(fabric: Fabric, intent: Intent,
                    memo: JobEntryMemo | None = None) -> dict[str, dict[EntryKey, OverlayEntry]]:
    """Every switch of the fabric appears, with an empty table if it needs nothing,
    so reconciliation also clears switches that no longer carry any pin.

    `memo` (job id -> (job, its entries)), when given, is reused for jobs that
    are the very same object as last time and updated in place: jobs are
    immutable, and re-deriving thousands of flows per pass would hold the GIL
    the API needs."""
    overlay: dict[str, dict[EntryKey, OverlayEntry]] = {name: {} for name in fabric.switches}
    for job_id, job in sorted(intent.jobs.items()):
        cached = memo.get(job_id) if memo is not None else None
        if cached is not None and cached[0] is job:
            entries = cached[1]
        else:
            entries = job_entries(fabric, job)
            if memo is not None:
                memo[job_id] = (job, entries)
        for entry in entries:
            overlay[entry.switch][entry.key] = entry
    if memo is not None:
        for stale in memo.keys() - intent.jobs.keys():
            del memo[stale]
    # Operator pins last: on the same NIC pair, the operator's choice wins.
    for pin in sorted(intent.pins.values()):
        for entry in pin_entries(fabric, pin):
            # validate_pin keeps directions disjoint, so keys never collide.
            overlay[entry.switch][entry.key] = entry
    return overlay
