"""Elephants and their demand: which measured flows are big enough to steer,
and what each would send if the network were not in its way, bounded by
what any of its paths can carry. Pure."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

import numpy as np

from controller.fabric import NicId
from controller.te.demand import nic_limited_by_number
from controller.te.engine.catalog import FlowCatalog
from controller.te.engine.frames import FlowFrame
from controller.te.engine.state import Elephants, EngineConfig, Move, Recent
from controller.te.jobs import MAX_QPS
from controller.te.view import FlowKey


def find_elephants(
    catalog: FlowCatalog,
    flows: FlowFrame,
    cat: np.ndarray,
    moves: Mapping[FlowKey, Move],
    recent: Recent,
    now: float,
    cfg: EngineConfig,
    planned: Collection[tuple[NicId, NicId]] = frozenset(),
) -> tuple[Elephants, np.ndarray]:
    """Fresh flow records (stale data is never acted on) at or above
    `elephant_fraction` of the NIC rate, alone or with the other queue
    pairs of their connection (`Connections`), between NICs of this fabric on
    different leaves: the ones an overlay entry can steer; and for each its
    row in `recent` (-1 if new). `cat`: the records' catalog rows, and
    `recent`'s are of the catalog as it is. Their
    rates are smoothed with what `recent` saw (one noisy sample must not
    move a flow) and their demands are Hedera's, bounded by the widest
    route's narrowest hop: a demand no path can carry is no demand.

    Hedera splits each NIC among every flow it sends or receives, the mice
    too (a sender above `incast_sender_fraction` of the NIC): split among the
    elephants alone, an all-to-all NIC's demands jump each time one of its
    many similar flows crosses the elephant threshold, and the jumps read as
    collisions that are not there. `planned`: NIC pairs placed jobs send
    between; a fresh record of one shares its NICs at any rate (an elastic
    flow of a collective starved now is fast a second later), while a job
    with no records (idle, or between iterations) takes no share."""
    index = catalog.index
    # Hedera's threshold is a share of the NIC; where every path is narrower
    # than a NIC, of what the flow's widest path carries: a flow taking a
    # tenth of its path is an elephant there, however wide its NIC.
    nic_bps = index.fabric.spec.rates.nic_gbps * 1e9
    sender_floor = min(cfg.incast_sender_fraction * nic_bps, cfg.elephant_fraction * float(index.capacity.min()))
    fresh = (flows.observed_at >= now - cfg.max_age_s) & (cat >= 0)
    fresh[fresh] = ~carries_acks(catalog, flows, np.flatnonzero(fresh), cat, cfg.elephant_fraction * nic_bps)
    sender = fresh & (flows.rate_bps >= sender_floor)
    if planned:
        quiet = np.flatnonzero(fresh & ~sender)
        sender[quiet[catalog.among(cat[quiet], planned)]] = True
    senders = np.flatnonzero(sender)
    shares = nic_limited_by_number(catalog.src[cat[senders]], catalog.dst[cat[senders]], nic_bps)
    crossing = catalog.nroutes[cat[senders]] > 0  # same leaf: nothing to steer
    flow, share = senders[crossing], shares[crossing]
    last = recent.find(cat[flow])
    known = last >= 0
    raw = flows.rate_bps[flow]
    a = cfg.smoothing
    rate = np.where(known, (1 - a) * recent.rate_bps[last] + a * raw, raw) if len(recent) else raw
    # Hysteresis: a known elephant stays one until its smoothed rate falls
    # to half the threshold. Behind an oversubscribed core a flow's fair
    # share sits near the threshold (1/7 of a NIC at 7:1), and noisy
    # samples dropping it in and out each cycle swing every path's load
    # by demand, which reads as collisions that move flows forever.
    bottleneck = catalog.bottleneck[cat[flow]]
    threshold = cfg.elephant_fraction * np.minimum(nic_bps, bottleneck)
    connections = Connections.of(catalog, cat[flow])
    stays = connections.sum(rate) >= threshold / 2
    joins = connections.sum(raw) >= threshold
    keep = np.flatnonzero(np.where(known, stays, joins))
    flow = flow[keep]
    c = cat[flow]
    row = index.via_rows(catalog.base[c], flows.ingress[flow], flows.transit[flow])
    found = Elephants(
        [flows.keys[i] for i in flow.tolist()],
        flow,
        c,
        rate[keep],
        raw[keep],
        np.minimum(share[keep], bottleneck[keep]),
        row,
    )
    return where_moved(found, catalog, moves), last[keep]


def carries_acks(
    catalog: FlowCatalog, flows: FlowFrame, records: np.ndarray, cat: np.ndarray, elephant_bps: float
) -> np.ndarray:
    """Per record of `records` (rows of `flows` with a catalog row): it is
    the acknowledgements of a flow the other way, not a flow of its own: its
    reverse 5-tuple has a record at a higher rate, and it is no elephant
    alone. An ACK stream sits near the sender floor (a TCP flow at a NIC's
    rate acks at ~0.4% of it), and one record above it would be a sender,
    and a QP of the NIC pair's connection the other way (`Connections`): a
    phantom elephant with a share of the NIC for demand. RoCE's responses
    share no 5-tuple with their requests (UDP port 4791 both ways), so none
    are found there."""
    own, rows = flows.rate_bps[records], cat[records]
    rate = np.zeros(len(catalog))
    rate[rows] = own
    reverse = catalog.reverse[rows]
    acks: np.ndarray = (reverse >= 0) & (rate[reverse] > own) & (own < elephant_bps)
    return acks


def where_moved(elephants: Elephants, catalog: FlowCatalog, moves: Mapping[FlowKey, Move]) -> Elephants:
    """`elephants` with each of `moves` where it was put, whatever its record
    says: its entries go out with this cycle, and what is planned next
    must see it there."""
    row = elephants.row.copy()
    for i, move in zip(elephants.find(catalog.rows(list(moves))).tolist(), moves.values()):
        if i >= 0:
            row[i] = catalog.index.row_of(int(catalog.base[elephants.cat[i]]), move.via)
    return replace(elephants, row=row)


@dataclass(frozen=True)
class Connections:
    """Flows grouped by their two NICs: where a pair has at most MAX_QPS
    flows they are the queue pairs of one RDMA connection, each a 5-tuple
    of its own. Hedera's threshold is for a connection: 16 QPs of a
    connection at a tenth of the NIC are 0.6% each, and a per-flow
    threshold would steer none of them."""

    group: np.ndarray  # per flow, its NIC pair
    counted: np.ndarray  # per flow, its pair is one connection's QPs

    @classmethod
    def of(cls, catalog: FlowCatalog, rows: np.ndarray) -> Connections:
        if not len(rows):
            return cls(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool))
        # One integer per NIC pair: np.unique over rows (axis=0) sorts a
        # structured view, ~15x slower on ft2-16k's 16,000 records.
        pairs = catalog.src[rows] * len(catalog.nics) + catalog.dst[rows]
        _, group, size = np.unique(pairs, return_inverse=True, return_counts=True)
        return cls(group, size[group] <= MAX_QPS)

    def sum(self, bps: np.ndarray) -> np.ndarray:
        """Per flow, what its connection sends (its own rate where its pair is no connection)."""
        if not len(bps):
            return bps
        return np.where(self.counted, np.bincount(self.group, bps)[self.group], bps)
