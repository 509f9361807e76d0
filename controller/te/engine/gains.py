"""What moving an elephant would gain: for elephants of a Fleet, every route
weighed against the one they take, by demand and as measured (`Weights`, in
arrays; Fleet.best_move_now is the same test for one elephant). `best_of`
weighs many elephants once; a `Turn` moves the elephants of one link over
capacity off it, best first, each weighed on the loads the moves before it
left. Pure."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from controller.te.engine.fleet import Fleet
from controller.te.engine.state import EngineConfig

BATCH_ELEPHANTS = 4096  # elephants per array pass of best_of: bounds its temporaries to tens of MB
ONE_BY_ONE = 8  # a turn with no more candidates than this weighs them in scalars: an array pass costs more


class Gains(NamedTuple):
    """Per elephant that has a move worth making: the elephant, what the
    move saves on its bottleneck by demand (of capacity), the route (a row
    of its routes) and that route's peak utilization by demand with it there."""

    elephant: np.ndarray
    gain: np.ndarray
    route: np.ndarray
    peak: np.ndarray


class Weights:
    """Elephants `idx` of a fleet, each with its routes padded to the longest
    (R): per (elephant, route) what the route would be with the elephant on
    it. Only links the two routes do not share count (a link both carry
    carries the elephant already). `refresh` re-weighs some entries after
    loads changed. Arrays are hop-major, (H, M, R): a route is a handful of
    links, and a reduction over a short last axis is numpy's slowest."""

    def __init__(self, fleet: Fleet, idx: np.ndarray, metered: np.ndarray) -> None:
        self.fleet = fleet
        self.idx = idx
        self.metered = metered[idx]
        index = fleet.index
        table = index.table()
        nroutes = fleet.nroutes[idx]
        offsets = np.arange(int(nroutes.max()) if len(idx) else 0)
        rows = np.minimum(fleet.base[idx, None] + offsets, len(table) - 1)
        self.hops = np.take(index.table_by_hop(), rows, axis=1)  # (H, M, R), pad-filled
        self.here = fleet.rows[idx] - fleet.base[idx]
        self.old = np.take(index.table_by_hop(), fleet.rows[idx], axis=1)  # (H, M): the route each takes
        self.bps = fleet.bps[idx].T  # (2, M): demand, rate
        self.blocked = offsets >= nroutes[:, None]
        if fleet.dead.any():
            self.blocked |= fleet.dead[self.hops].any(axis=0)
        self.blocked[np.arange(len(idx)), self.here] = True
        self.disjoint = bool(fleet.disjoint[idx].all())
        if self.disjoint:
            self.shared = self.kept = None
        else:
            self.shared = (self.hops[:, None] == self.old[None, :, :, None]).any(
                axis=1
            )  # (H, M, R): on the old route too
            self.kept = (self.old[:, None, :, None] == self.hops[None]).any(axis=1)  # (H, M, R): old link still used
        shape = self.hops.shape[1:]
        self.new = np.zeros((2, *shape))  # peak by demand and as measured with the elephant there
        self.peak = np.zeros(shape)  # the route's whole peak by demand with the elephant there
        self.fair = np.zeros(shape)  # its narrowest hop's capacity over its elephants, this one included
        self._flatten()
        self._weigh(np.arange(self.peak.size))

    def _flatten(self) -> None:
        """Flat views, one entry per (elephant, route): refresh picks a few at a time."""
        size, routes = self.peak.size, self.hops.shape[2]
        self._hops = self.hops.reshape(len(self.hops), size)
        self._shared = None if self.shared is None else self.shared.reshape(len(self.hops), size)
        self._bps = np.repeat(self.bps, routes, axis=1)  # (2, entries)

    def keep(self, kept: np.ndarray) -> None:
        """Keeps only the elephants `kept` (positions): a turn weighs fewer as it goes."""
        self.idx, self.metered, self.here, self.bps = (
            self.idx[kept],
            self.metered[kept],
            self.here[kept],
            self.bps[:, kept],
        )
        self.hops, self.old, self.blocked = self.hops[:, kept], self.old[:, kept], self.blocked[kept]
        if self.shared is not None and self.kept is not None:
            self.shared, self.kept = self.shared[:, kept], self.kept[:, kept]
        self.new, self.peak, self.fair = self.new[:, kept], self.peak[kept], self.fair[kept]
        self._flatten()

    def refresh(self, stale: np.ndarray) -> None:
        """Re-weighs the (elephant, route) entries `stale` on the loads as they stand."""
        entries = np.flatnonzero(stale)
        if len(entries):
            self._weigh(entries)

    def _weigh(self, entries: np.ndarray) -> None:
        fleet = self.fleet
        hops = np.take(self._hops, entries, axis=1)  # (H, entries)
        cap = fleet.capacity[hops]
        demand = fleet.both[0][hops]
        with_demand = (demand + self._bps[0, entries]) / cap
        with_rate = (fleet.both[1][hops] + self._bps[1, entries]) / cap
        count = fleet.count[hops]
        new, peak, fair = self.new.reshape(2, -1), self.peak.reshape(-1), self.fair.reshape(-1)  # views
        if self._shared is None:
            new[0, entries] = peak[entries] = with_demand.max(axis=0)
            new[1, entries] = with_rate.max(axis=0)
            count = count + 1
        else:
            shared = np.take(self._shared, entries, axis=1)
            new[0, entries] = np.where(shared, -np.inf, with_demand).max(axis=0)
            new[1, entries] = np.where(shared, -np.inf, with_rate).max(axis=0)
            peak[entries] = np.where(shared, demand / cap, with_demand).max(axis=0)
            count = count + ~shared
        # A floor on its max-min rate there, as elephants held elsewhere leave it more.
        with np.errstate(divide="ignore"):  # the pad: no elephant, infinite capacity
            fair[entries] = (cap / count).min(axis=0)

    def gains(self, cfg: EngineConfig, ks: np.ndarray | slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """(M, R) each (or for the elephants at positions `ks`): what each
        move saves on the elephant's bottleneck by demand, and whether it
        passes: `min_gain` by demand, and something as measured: the route's
        load falls, or its fair share beats what the flow gets now (behind an
        oversubscribed core every link is full as measured, a lone TCP flow
        filling its own: only the shares tell a move from a link of three to
        a link of one from a move that gains nothing); a metered flow's rate
        is its meter's, known without noise: its demand gain is enough."""
        fleet, old = self.fleet, self.old[:, ks]
        cap = fleet.capacity[old]
        by_demand, measured = fleet.both[0][old] / cap, fleet.both[1][old] / cap  # (H, M)
        if self.kept is None:
            before = [by_demand.max(axis=0)[:, None], measured.max(axis=0)[:, None]]
        else:
            kept = self.kept[:, ks]
            before = [np.where(kept, -np.inf, load[:, :, None]).max(axis=0) for load in (by_demand, measured)]
        with np.errstate(invalid="ignore"):  # a route all shared: nothing differs, -inf - -inf
            gain, gain_measured = before[0] - self.new[0, ks], before[1] - self.new[1, ks]
        fairer = self.fair[ks] >= self.bps[1, ks][:, None] * (1 + cfg.min_gain)
        ok = ~self.blocked[ks] & (gain >= cfg.min_gain) & ((gain_measured > 0) | fairer | self.metered[ks][:, None])
        return gain, ok


def best_of(fleet: Fleet, members: np.ndarray, cfg: EngineConfig, metered: np.ndarray) -> Gains:
    """Per elephant of `members` that has one, the route that saves most on
    its bottleneck by demand among those that pass (Weights.gains), in one
    array pass per batch of elephants. `metered`: per elephant."""
    found: list[Gains] = []
    for start in range(0, len(members), BATCH_ELEPHANTS):
        weights = Weights(fleet, np.asarray(members[start : start + BATCH_ELEPHANTS], dtype=np.int64), metered)
        gain, ok = weights.gains(cfg)
        rows = np.argmax(np.where(ok, gain, -np.inf), axis=1)
        m = np.flatnonzero(ok.any(axis=1))
        found.append(Gains(weights.idx[m], gain[m, rows[m]], rows[m], weights.peak[m, rows[m]]))
    if not found:
        return Gains(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0))
    return Gains(*(np.concatenate(column) for column in zip(*found)))


def any_gain(fleet: Fleet, members: np.ndarray, cfg: EngineConfig, metered: np.ndarray, batch: int = 32) -> bool:
    """Some elephant of `members` has a move that passes: weighed a few at a
    time, as one is usually enough to tell."""
    for start in range(0, len(members), batch):
        if len(best_of(fleet, members[start : start + batch], cfg, metered).elephant):
            return True
    return False


class Turn:
    """One link's turn: its candidates moved off while the link is over and
    a move passes, the move leaving the lowest peak on the link and the
    route it takes first (the lowest peak, not the largest gain, which would
    favour the smallest elephants and can leave the big ones stuck where
    only a swap would free them), each weighed on the loads the moves
    before it left.

    A few candidates are weighed one by one, again after each move. Many
    (behind an oversubscribed core, hundreds on each core link) go in
    rounds: each round weighs them all in one array pass (then only the
    routes the last round's moves changed) and takes them in that order,
    each move after the first weighed again alone; a round ends at the first
    that no longer passes, the turn at a round that moves none."""

    def __init__(self, fleet: Fleet, link: int, candidates: np.ndarray, metered: np.ndarray) -> None:
        self.fleet = fleet
        self.link = link
        self.candidates = candidates
        self.metered = metered

    def run(
        self, cfg: EngineConfig, allowed: Callable[[int], bool], move: Callable[[int, int, float], list[int]]
    ) -> int:
        """Moves through `move(elephant, route, gain)`, which returns the
        links whose load it changed; `allowed(elephant)`: the budget still
        lets it move. Returns how many it moved."""
        if len(self.candidates) <= ONE_BY_ONE:
            return self._one_by_one(cfg, allowed, move)
        return self._in_rounds(cfg, allowed, move)

    def _left(self, i: int) -> float:
        """The link's utilization by demand with elephant i off it."""
        fleet = self.fleet
        return float((fleet.both[0][self.link] - fleet.bps[i, 0]) / fleet.capacity[self.link])

    def _one_by_one(
        self, cfg: EngineConfig, allowed: Callable[[int], bool], move: Callable[[int, int, float], list[int]]
    ) -> int:
        fleet, waiting, moves = self.fleet, self.candidates.tolist(), 0
        while fleet.over(self.link):
            best: tuple[float, float, int, int] | None = None
            for i in waiting:
                found = fleet.best_move_now(i, cfg, bool(self.metered[i])) if allowed(i) else None
                if found is not None:
                    row, gain, peak = found
                    candidate = (max(self._left(i), peak), -gain, i, row)
                    best = candidate if best is None else min(best, candidate)
            if best is None:
                break
            _, minus_gain, i, row = best
            move(i, row, -minus_gain)
            waiting.remove(i)
            moves += 1
        return moves

    def _in_rounds(
        self, cfg: EngineConfig, allowed: Callable[[int], bool], move: Callable[[int, int, float], list[int]]
    ) -> int:
        fleet, link = self.fleet, self.link
        weights = Weights(fleet, self.candidates, self.metered)
        moves = 0
        while fleet.over(link):
            gain, ok = weights.gains(cfg)
            found = np.flatnonzero(ok.any(axis=1))
            if len(found) * 2 < len(ok):
                # Moves only load other routes and unload this link: an elephant
                # with no move worth making now has none later in this turn.
                weights.keep(found)
                gain, ok, found = gain[found], ok[found], np.arange(len(found))
            if not len(found):
                break
            rows = np.argmax(np.where(ok[found], gain[found], -np.inf), axis=1)
            left = (fleet.both[0][link] - weights.bps[0, found]) / fleet.capacity[link]
            best = np.maximum(left, weights.peak[found, rows])
            order = np.lexsort((rows, weights.idx[found], -gain[found, rows], best))
            changed = np.zeros(len(fleet.capacity), dtype=bool)
            round_moves = 0
            for k, row, now in zip(found[order].tolist(), rows[order].tolist(), gain[found, rows][order].tolist()):
                i = int(weights.idx[k])
                if not fleet.over(link):
                    break
                if not allowed(i):
                    continue
                if round_moves:  # on the loads the moves before it left
                    again = fleet.best_move_now(i, cfg, bool(weights.metered[k]))
                    if again is None:
                        break
                    row, now, _ = again
                changed[move(i, row, now)] = True
                weights.blocked[k] = True  # moved: it rests now
                round_moves += 1
            if not round_moves:
                break
            moves += round_moves
            weights.refresh(changed[weights.hops].any(axis=0))
        return moves
