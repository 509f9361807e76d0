"""What a flow's key says about it, worked out once per key: its two NICs
(as numbers), its source leaf, and its leaf pair's routes. A cycle looks up
each of tens of thousands of flow records here instead of parsing two
addresses and walking the fabric per record; keys it has not seen are
worked out together, by NIC and leaf numbers. Pure."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np

from controller.fabric import NicId
from controller.fabric import addressing as ad
from controller.te.engine.links import LinkIndex
from controller.te.view import FlowKey, reverse_key

COLUMNS = ("src", "dst", "leaf", "base", "nroutes", "disjoint", "bottleneck")
# Leaf pairs whose routes are worked out between two calls of `pause`: a
# catalog started over, or a cold start, works out thousands (~0.15 ms each).
PAIRS_BETWEEN_PAUSES = 32


class FlowCatalog:
    """Rows 0..n-1, one per flow key between two NICs of the fabric; the
    columns are arrays, indexed by row."""

    def __init__(self, index: LinkIndex, nics: NicTables | None = None) -> None:
        """`nics`: the fabric's NIC tables, if already made for an index of it
        (they never grow: a catalog that starts over keeps them)."""
        self.index = index
        self.nic_tables = nics = nics or NicTables.of(index)
        self.nics, self.nic_number, self._address_number = nics.nics, nics.number, nics.address_number
        self.leaf_names, self._leaf_number, self._nic_leaf = nics.leaf_names, nics.leaf_number, nics.nic_leaf
        self.uplinks, self.nic_tx, self.nic_rx = nics.uplinks, nics.nic_tx, nics.nic_rx
        self._pair_routes: dict[int, tuple[int, int, bool, float]] = {}  # leaf pair -> base, nroutes, disjoint, widest
        self._pairs: tuple[Collection[tuple[NicId, NicId]], np.ndarray] | None = None
        self._link_leaf: np.ndarray | None = None
        # Rows mean something only in this catalog: a state made with another
        # (TeState.recent) says whose, and its flows are found again by key.
        self.owner = uuid.uuid4().hex  # a token: a state from another catalog (or process) is told apart
        self._row: dict[FlowKey, int] = {}
        self.src = np.zeros(0, dtype=np.int64)  # NIC numbers
        self.dst = np.zeros(0, dtype=np.int64)
        self.leaf = np.zeros(0, dtype=np.int64)  # the source leaf's number
        self.base = np.zeros(0, dtype=np.int64)  # its routes' first row in the route table
        self.nroutes = np.zeros(0, dtype=np.int64)  # 0: both NICs on one leaf
        self.disjoint = np.zeros(0, dtype=bool)
        self.bottleneck = np.zeros(0)  # the widest route's narrowest hop
        self.reverse = np.zeros(0, dtype=np.int64)  # the row of its reverse 5-tuple, -1 until one is seen

    def __len__(self) -> int:
        return len(self._row)

    def rows(self, keys: Sequence[FlowKey], pause: Callable[[], None] | None = None) -> np.ndarray:
        """Per key its row, -1 where it is not a flow between two NICs of this
        fabric. `pause` is called now and then while new leaf pairs' routes
        are worked out (Engine.pause: the daemon's API goes first)."""
        get = self._row.get
        out = np.fromiter((get(k, -2) for k in keys), dtype=np.int64, count=len(keys))
        new = np.flatnonzero(out == -2)
        if len(new):
            out[new] = self._add([keys[i] for i in new.tolist()], pause)
        return out

    def _add(self, keys: list[FlowKey], pause: Callable[[], None] | None) -> np.ndarray:
        number = self._address_number.get
        src = np.fromiter((number(k[0], -1) for k in keys), dtype=np.int64, count=len(keys))
        dst = np.fromiter((number(k[1], -1) for k in keys), dtype=np.int64, count=len(keys))
        valid = np.flatnonzero((src >= 0) & (dst >= 0))
        src, dst = src[valid], dst[valid]
        leaf = self._nic_leaf[src]
        pairs, first, inverse = np.unique(
            leaf * len(self.leaf_names) + self._nic_leaf[dst], return_index=True, return_inverse=True
        )
        found = []
        for k, (p, i) in enumerate(zip(pairs.tolist(), first.tolist())):
            if pause is not None and k % PAIRS_BETWEEN_PAUSES == PAIRS_BETWEEN_PAUSES - 1:
                pause()
            found.append(self._routes_of(p, int(src[i]), int(dst[i])))
        routes = np.array(found).reshape(-1, 4)[inverse]
        start = len(self.src)
        new = {
            "src": src,
            "dst": dst,
            "leaf": leaf,
            "base": routes[:, 0].astype(np.int64),
            "nroutes": routes[:, 1].astype(np.int64),
            "disjoint": routes[:, 2].astype(bool),
            "bottleneck": routes[:, 3],
        }
        for name in COLUMNS:
            setattr(self, name, np.concatenate([getattr(self, name), new[name]]))
        out = np.full(len(keys), -1, dtype=np.int64)
        out[valid] = np.arange(start, start + len(valid))
        self._row.update(zip(keys, out.tolist()))
        self._pair_with_reverses([keys[i] for i in valid.tolist()], start)
        return out

    def _pair_with_reverses(self, keys: list[FlowKey], start: int) -> None:
        """`reverse` for rows start.. (`keys`), and for the rows already here
        whose reverse they are."""
        get = self._row.get
        reverse = np.fromiter((get(reverse_key(k), -1) for k in keys), dtype=np.int64, count=len(keys))
        self.reverse = np.concatenate([self.reverse, reverse])
        older = np.flatnonzero((reverse >= 0) & (reverse < start))
        self.reverse[reverse[older]] = start + older

    def _routes_of(self, pair: int, src: int, dst: int) -> tuple[int, int, bool, float]:
        found = self._pair_routes.get(pair)
        if found is None:
            routes = self.index.routes(self.nics[src], self.nics[dst])  # the same for every NIC of the two leaves
            found = self._pair_routes[pair] = (routes.base, len(routes.vias), routes.disjoint, routes.bottleneck_bps)
        return found

    def src_nic(self, row: int) -> NicId:
        return self.nics[int(self.src[row])]

    def dst_nic(self, row: int) -> NicId:
        return self.nics[int(self.dst[row])]

    def link_leaf(self, index: LinkIndex) -> np.ndarray:
        """Per egress of `index` (and its pad), the number of the leaf it
        leaves from, -1 where it is no leaf's."""
        if self._link_leaf is None:
            leaves = [self._leaf_number.get(egress.node, -1) for egress in index.egresses]
            self._link_leaf = np.array([*leaves, -1], dtype=np.int64)
        return self._link_leaf

    def pair_codes(self, pairs: Collection[tuple[NicId, NicId]]) -> np.ndarray:
        """NIC pairs (placed jobs', pinned ones) as sorted numbers, for
        `np.isin` against `pair_code`; the last set asked for is remembered
        (the same intent comes every cycle)."""
        if self._pairs is None or self._pairs[0] is not pairs:
            number = self.nic_number
            codes = [number[s] * len(number) + number[d] for s, d in pairs if s in number and d in number]
            self._pairs = (pairs, np.unique(np.array(codes, dtype=np.int64)))
        return self._pairs[1]

    def among(self, rows: np.ndarray, pairs: Collection[tuple[NicId, NicId]]) -> np.ndarray:
        """Per row: its NIC pair is one of `pairs`."""
        if not pairs or not len(rows):
            return np.zeros(len(rows), dtype=bool)
        return np.isin(self.src[rows] * len(self.nic_number) + self.dst[rows], self.pair_codes(pairs))


@dataclass(frozen=True)
class NicTables:
    """Every NIC of a fabric numbered, with its address, leaf and the egress
    ids of its access link (its transmit side, and its leaf's port towards
    it), and each leaf's uplink count: per fabric, never growing."""

    nics: tuple[NicId, ...]
    number: dict[NicId, int]
    address_number: dict[str, int]
    leaf_names: list[str]
    leaf_number: dict[str, int]
    nic_leaf: np.ndarray  # per NIC number, its leaf's number
    uplinks: list[int]  # per leaf number
    nic_tx: np.ndarray
    nic_rx: np.ndarray

    @classmethod
    def of(cls, index: LinkIndex) -> NicTables:
        fabric = index.fabric
        nics = fabric.nics
        leaves = [fabric.attachment(nic).node for nic in nics]
        leaf_names = sorted(set(leaves))
        leaf_number = {name: i for i, name in enumerate(leaf_names)}
        return cls(
            nics,
            {nic: i for i, nic in enumerate(nics)},
            {ad.nic_ip(nic): i for i, nic in enumerate(nics)},
            leaf_names,
            leaf_number,
            np.array([leaf_number[name] for name in leaves], dtype=np.int64),
            [len(fabric.uplinks(name)) for name in leaf_names],
            np.array([index.ids[fabric.nic_egress(nic)] for nic in nics], dtype=np.int64),
            np.array([index.ids[fabric.attachment(nic)] for nic in nics], dtype=np.int64),
        )
