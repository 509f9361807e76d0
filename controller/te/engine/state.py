"""The engine's data: its tuning, the elephants it sees, the moves and
meters it holds between cycles, and the decisions it reports. Pure."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from controller.fabric import NicId
from controller.te.view import EWMA_ALPHA, FlowKey


@dataclass(frozen=True)
class EngineConfig:
    elephant_fraction: float = 0.1  # of the NIC rate (Hedera)
    max_age_s: float = 1.0
    hysteresis_s: float = 3.0  # a moved flow stays put this long (and is then checked against where it was)
    # Path changes TE makes to one flow while it stays an elephant and the
    # same links stay up: a bound on churn. 0: none.
    max_path_changes: int = 2
    # Moves per leaf per cycle, at most: a local cap, so one cycle can fix
    # every leaf of the fabric while no leaf churns. 0: the leaf's uplink count.
    max_moves_per_leaf: int = 0
    # Utilization points a move must save on the flow's bottleneck as predicted
    # from demands; the measurements must show a gain too.
    min_gain: float = 0.05
    # An elephant measuring at least this fraction of its demand is not
    # squeezed, wherever its link's counters say: moving it can only cost.
    satisfied: float = 0.7
    # A link whose port measures at least this fraction of its capacity is
    # full: a plan relieves only links the measurements agree are congested.
    saturated: float = 0.9
    # Measured load on a link beyond what its elephants send is smoothed
    # (port counters and flow records are sampled apart: their difference is
    # noisy); below this fraction of the link it is noise, not traffic.
    background_floor: float = 0.2
    background_smoothing: float = 0.2  # EWMA weight of the newest residual
    # The EWMA weight with which port rates reach the engine (the LinkView's):
    # the load the elephants' raw records explain is smoothed alike before
    # the two are compared (cycle._explained).
    port_smoothing: float = EWMA_ALPHA
    # A moved flow that measures this much below its rate before the move,
    # once settled, goes back (once) and stays.
    revert_margin: float = 0.3
    smoothing: float = 0.5  # EWMA weight of the newest rate sample of a flow
    expire_after_s: float = 3.0  # a moved flow not seen for this long gives its entry back
    # A flow's path changes are remembered this long after it was last seen
    # as an elephant, not only while it counts as one lately: TCP sharing a
    # NIC four ways dips under the threshold for seconds and comes back, and
    # each time its budget started over (randx4 at 10 Mb/s: 3 path changes).
    # Bounded: only flows TE moved, and only this long.
    forget_changes_after_s: float = 30.0
    incast_fan_in: int = 3
    incast_sender_fraction: float = 0.01  # of the NIC rate: below it a flow is not a sender (an ACK stream, a probe)
    # Incast is senders offering more than the receiver's NIC takes, which
    # only senders that do not back off do (UDP at line rate, a storage
    # burst): flows that converge and share the NIC as TCP does offer what
    # it delivers, and a meter would only take from them. The margin keeps
    # a few noisy records of such flows (each +-30 %) from reading as one.
    incast_overload: float = 1.5
    # Senders are metered to this fraction of the receiver NIC's fair share:
    # under 1 so the receiver's queue drains instead of sitting full.
    incast_headroom: float = 0.95
    meter_rate_tolerance: float = 0.1  # a new fair share within this of the old keeps the meter as is


class _ByFlow:
    """Columns of flows, each with its FlowCatalog row (`cat`), found by that
    row: the few flows a cycle looks up (its moves, its meters), without a
    table of every flow's key."""

    keys: list[FlowKey]
    cat: np.ndarray

    def __len__(self) -> int:
        return len(self.keys)

    @functools.cached_property
    def _at(self) -> np.ndarray:
        at = np.full(int(self.cat.max()) + 1 if len(self.cat) else 0, -1, dtype=np.int64)
        at[self.cat] = np.arange(len(self.cat))
        return at

    def find(self, cat: np.ndarray) -> np.ndarray:
        """Per flow (by catalog row) its row here, -1 if it has none."""
        at = self._at
        if not len(at):
            return np.full(len(cat), -1, dtype=np.int64)
        inside = (cat >= 0) & (cat < len(at))
        return np.where(inside, at[np.where(inside, cat, 0)], -1)


@dataclass(frozen=True, eq=False)
class Elephants(_ByFlow):
    """A cycle's elephants as columns, one row each (tens of thousands on a
    large fabric): `flow` is the row of its record in the cycle's FlowFrame
    (-1 for one carried over from `Recent`), `cat` its FlowCatalog row,
    `rate_bps` its smoothed rate, `raw_bps` this cycle's sample, `row` the
    route-table row (LinkIndex) of the path it takes now, -1 if unknown."""

    keys: list[FlowKey]
    flow: np.ndarray
    cat: np.ndarray
    rate_bps: np.ndarray
    raw_bps: np.ndarray
    demand_bps: np.ndarray
    row: np.ndarray

    def __add__(self, other: Elephants) -> Elephants:
        if not len(other):
            return self
        columns = ("flow", "cat", "rate_bps", "raw_bps", "demand_bps", "row")
        return Elephants(
            self.keys + other.keys, *(np.concatenate([getattr(self, c), getattr(other, c)]) for c in columns)
        )


@dataclass(frozen=True, eq=False)
class Recent(_ByFlow):
    """Elephants seen lately, as columns: each as last seen, its rate the
    EWMA of its samples, `row` the route-table row it took (-1 unknown),
    `cat` its row in the FlowCatalog whose `owner` token it holds. A flow
    black-holed by a failure measures ~0 at once and stops looking like an
    elephant; it is exactly the one to move."""

    keys: list[FlowKey] = field(default_factory=list)
    rate_bps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    demand_bps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    at: np.ndarray = field(default_factory=lambda: np.zeros(0))
    row: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    cat: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    owner: str = ""  # the FlowCatalog.owner its `cat` and `row` rows belong to


@dataclass(frozen=True)
class Move:
    key: FlowKey
    src: NicId
    dst: NicId
    via: str
    moved_at: float
    last_seen: float
    from_via: str = ""  # where it was before this move ("" if unknown, e.g. adopted after a restart)
    rate_before: float = 0.0  # its smoothed rate then; 0: nothing to compare against
    settled: bool = False  # checked against rate_before (once)
    held: bool = False  # reverted after measuring worse: stays here, TE moves it no more
    # What the plan it was part of predicted for it (0: not predicted). A
    # plan may leave one flow less for many more: the move is checked
    # against the lower of this and rate_before, so a loss the plan meant
    # is no reason to go back, and a loss it did not mean is.
    rate_expected: float = 0.0
    # Moved off a dead or drained path (or pinned where it is for its ACKs'
    # sake): let go once that path is back (once nothing is dead).
    rescued: bool = False


@dataclass(frozen=True)
class Meter:
    """A rate limit on one incast sender's flow at its ingress leaf."""

    key: FlowKey
    src: NicId
    dst: NicId
    rate_bps: float
    last_incast: float  # when its receiver was last seen in incast


FLOW_FIELDS = ("src", "dst", "protocol", "sport", "dport")  # a FlowKey's, in order


class DecisionKind(StrEnum):
    """What a decision reports; the value is its metric label and log word."""

    COLLISION = "collision"  # an uplink newly collided
    REROUTE = "reroute"  # an elephant moved (or pinned where it is)
    INCAST = "incast"  # a receiver newly in incast; its senders metered
    EXPIRE = "expire"  # a move or an incast's meters given back
    LINK_DOWN = "link-down"  # telemetry newly reports a link down
    UNFIXABLE = "unfixable"  # a collision no move can relieve (the best routing shares it too, or a pin/job holds it)
    REVERT = "revert"  # a moved flow measured worse than before its move: back where it was, and held


@dataclass(frozen=True)
class Decision:
    """One thing the engine decided, as a record: `subject` names it in
    words (a flow, an uplink, a NIC), the optional fields say what it is
    about as data, `reason` why, for people."""

    kind: DecisionKind
    subject: str
    reason: str
    at: float
    flow: FlowKey | None = None  # the flow moved, reverted, let go or metered
    link: str | None = None  # "switch:port": the uplink collided or unfixable, the link down
    from_via: str | None = None  # a move's path before ("" where TE did not know it) ...
    to_via: str | None = None  # ... and after

    def as_record(self) -> dict[str, Any]:
        """As one JSON object: the flow's fields named, unset fields left out."""
        record: dict[str, Any] = {"kind": self.kind.value, "subject": self.subject, "at": self.at}
        if self.flow is not None:
            record["flow"] = dict(zip(FLOW_FIELDS, self.flow))
        record |= {name: value for name in ("link", "from_via", "to_via") if (value := getattr(self, name)) is not None}
        record["reason"] = self.reason
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Decision:
        """`as_record`, read back."""
        flow = record.get("flow")
        return cls(
            DecisionKind(record["kind"]),
            record["subject"],
            record["reason"],
            float(record["at"]),
            flow=(flow["src"], flow["dst"], flow["protocol"], flow["sport"], flow["dport"]) if flow else None,
            link=record.get("link"),
            from_via=record.get("from_via"),
            to_via=record.get("to_via"),
        )


@dataclass(frozen=True, eq=False)
class Fruitless:
    """The inputs of a joint search that found no plan: the same again are
    not searched again (the steady state of a fabric whose squeezed flows
    no routing frees costs no search every cycle). `key` fingerprints what
    must be equal (routes, flows, what may move, caps, dead links), and
    the background, which noise moves every cycle, within a step. They
    are searched again after `hysteresis_s` (the annealer draws anew), up
    to `searches` times in all.'"""

    key: int
    background: np.ndarray
    at: float
    searches: int = 1
    links: frozenset[int] = frozenset()  # the squeezed links it searched (a link confirmed since is searched)


@dataclass(frozen=True)
class PathChanges:
    """The path changes TE made one flow, and when it was last seen as an elephant."""

    count: int
    seen_at: float


@dataclass(frozen=True)
class TeState:
    moves: Mapping[FlowKey, Move] = field(default_factory=dict)
    incasts: frozenset[str] = frozenset()  # destination NICs currently in incast
    collisions: frozenset[str] = frozenset()  # uplinks currently collided
    down: frozenset[str] = frozenset()  # links telemetry reports down
    recent: Recent = field(default_factory=Recent)
    meters: Mapping[FlowKey, Meter] = field(default_factory=dict)
    unfixable: frozenset[str] = frozenset()  # collided uplinks no move can relieve
    residual: np.ndarray | None = None  # per egress: smoothed load beyond the elephants' (see background_floor)
    explained: np.ndarray | None = None  # per egress: the elephants' record load, smoothed as the port's rate
    port_at: np.ndarray | None = None  # per egress: when the port sample last in `explained` was taken (-inf: none)
    traffic: int = 0  # a fingerprint of the traffic: the elephants seen lately and the links down
    changes: Mapping[FlowKey, PathChanges] = field(default_factory=dict)  # per flow TE moved (Cycle.changes_so_far)
    fruitless: Fruitless | None = None  # the last joint search that found no plan, if the last one did not


def describe_flow(key: FlowKey) -> str:
    src, dst, proto, sport, dport = key
    return f"{src}:{sport}->{dst}:{dport}/{proto or 'ip'}"
