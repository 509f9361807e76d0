"""The engine's data: its tuning, the elephants it sees, the moves and
meters it holds between cycles, and the decisions it reports. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from controller.fabric import NicId
from controller.fabric import addressing as ad
from controller.te.view import FlowKey


@dataclass(frozen=True)
class EngineConfig:
    elephant_fraction: float = 0.1  # of the NIC rate (Hedera)
    max_age_s: float = 1.0
    hysteresis_s: float = 3.0
    max_moves_per_cycle: int = 4
    min_gain: float = 0.05  # utilization points a move must save on the flow's bottleneck
    expire_after_s: float = 3.0  # a moved flow not seen for this long gives its entry back
    incast_fan_in: int = 3
    incast_sender_fraction: float = 0.01  # of the NIC rate: below it a flow is not a sender (an ACK stream, a probe)
    incast_utilization: float = 0.9
    # Senders are metered to this fraction of the receiver NIC's fair share:
    # under 1 so the receiver's queue drains instead of sitting full.
    incast_headroom: float = 0.95
    meter_rate_tolerance: float = 0.1  # a new fair share within this of the old keeps the meter as is


@dataclass(frozen=True)
class Elephant:
    key: FlowKey
    src: NicId
    dst: NicId
    rate_bps: float
    via: str  # the spine it crosses now ("" if unknown)
    demand_bps: float = 0.0


@dataclass(frozen=True)
class Move:
    key: FlowKey
    src: NicId
    dst: NicId
    via: str
    moved_at: float
    last_seen: float


@dataclass(frozen=True)
class Meter:
    """A rate limit on one incast sender's flow at its ingress leaf."""

    key: FlowKey
    src: NicId
    dst: NicId
    rate_bps: float
    last_incast: float  # when its receiver was last seen in incast


class DecisionKind(StrEnum):
    """What a decision reports; the value is its metric label and log word."""

    COLLISION = "collision"  # an uplink newly collided
    REROUTE = "reroute"  # an elephant moved (or pinned where it is)
    INCAST = "incast"  # a receiver newly in incast; its senders metered
    EXPIRE = "expire"  # a move or an incast's meters given back
    LINK_DOWN = "link-down"  # telemetry newly reports a link down


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    subject: str
    reason: str
    at: float


@dataclass(frozen=True)
class TeState:
    moves: Mapping[FlowKey, Move] = field(default_factory=dict)
    incasts: frozenset[str] = frozenset()  # destination NICs currently in incast
    collisions: frozenset[str] = frozenset()  # uplinks currently collided
    down: frozenset[str] = frozenset()  # links telemetry reports down
    recent: Mapping[FlowKey, tuple[Elephant, float]] = field(default_factory=dict)  # elephant, last seen
    meters: Mapping[FlowKey, Meter] = field(default_factory=dict)


def nic_of(address: str) -> NicId | None:
    try:
        return ad.parse_nic_address(address)
    except ad.AddressError:
        return None


def describe_flow(key: FlowKey) -> str:
    src, dst, proto, sport, dport = key
    return f"{src}:{sport}->{dst}:{dport}/{proto or 'ip'}"
