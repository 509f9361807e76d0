"""Max-min fair rates with the routing chosen by the optimiser, every flow free
to split over its equal-cost paths: progressive filling by LPs (HiGHS). Pure.

Variables: t (the level being raised), r_b (the rate of each flow of bundle b)
and y_p (the total a commodity sends on its path p). Rows: each fabric link's
load <= its capacity; each shared NIC link's flows <= its capacity; each
commodity's paths carry exactly its flows' rates. A flow's own NIC links and
its demand are bounds on r_b. Splitting a commodity's y among its flows is
always possible (proportionally), so this is the per-flow, per-path LP
without its per-flow path variables.

One level of the filling:
1. LP1: maximise t with r_b >= t for every unfrozen bundle (frozen ones keep
   their level as a lower bound). t* is the next level.
2. Which unfrozen bundles cannot grow past t*? A positive dual on "r_b >= t"
   proves it: complementary slackness holds for every optimal primal, and
   every allocation with all unfrozen >= t* is optimal, so r_b = t* in all of
   them. The duals sum to 1, so at least one bundle freezes per level.
3. Those the duals leave open: LP2 keeps every unfrozen bundle >= t* and
   maximises their growth, each capped at t* + GROWTH. Bundles that grow are
   not blocked; if none of the open ones grows, all of them are blocked (any
   one that could grow would raise the objective). Else LP2 again on the rest.

Two shortcuts keep the LPs few, both exact:
- Caps (demands, NIC links) are levels too. Rather than one LP per distinct
  cap, `_next_level` searches how many caps the filling passes before a
  link stops it (doubling, then halving: a few LPs).
- Before each level, the last solution's routing is filled on its own (no
  LP, `fair.first_full`): if it carries every unfrozen bundle at its cap, or
  above some level L, that allocation proves the filling reaches L with
  nothing but caps in the way. A permutation on a healthy fabric is proven
  at line rate this way, by evenly split routing, with no LP at all.
Interchangeable spines are merged into one path per class (symmetry.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from controller.errors import RailyardError
from emulation.model.fair import first_full
from emulation.model.network import Network
from emulation.model.symmetry import lp_paths

# Normalised units (the largest capacity is 1). HiGHS is feasible to 1e-7:
# lower bounds are relaxed by SLACK so a level found by one LP stays
# feasible in the next; a flow counts as growing only past TOL.
SLACK = 1e-7
TOL = 1e-6
GROWTH = 1e-3  # cap on each bundle's growth in LP2: spreads it over every bundle that can grow
DUAL_TOL = 1e-9


class OptimumError(RailyardError):
    """The solver did not find an optimum (a bug: these LPs are always feasible and bounded)."""


@dataclass(frozen=True, eq=False)
class Filling:
    level: np.ndarray  # per bundle, normalised
    path_total: np.ndarray  # per path (in commodity order), normalised: the commodity's flow on it
    path_commodity: np.ndarray
    lps: int
    levels: int


class _Lp:
    """The rows that do not change from one LP to the next."""

    def __init__(self, net: Network) -> None:
        bundles = net.bundles
        self.n_bundles = b = len(bundles)
        self.count = np.array([len(x.members) for x in bundles], dtype=float)
        self.cap = np.array([x.cap for x in bundles], dtype=float)
        self.paths = paths = lp_paths(net)
        path_links = list(zip(paths.commodity.tolist(), paths.links))
        self.n_paths = n_p = len(path_links)
        self.path_commodity = paths.commodity
        self.n = 1 + b + n_p
        self.link_cap = link_cap = paths.link_cap
        fabric_links = np.unique(np.concatenate([p for _, p in path_links] or [np.empty(0, np.int64)]))
        row_of = {int(link): i for i, link in enumerate(fabric_links)}
        rows = [row_of[int(j)] for _, p in path_links for j in p]
        cols = [1 + b + i for i, (_, p) in enumerate(path_links) for _ in p]
        fabric = sp.csr_array((np.ones(len(rows)), (rows, cols)), shape=(len(row_of), self.n))
        shared = sorted({s for x in bundles for s in x.shared})
        srow = {s: i for i, s in enumerate(shared)}
        rows = [srow[s] for x in bundles for s in x.shared]
        cols = [1 + i for i, x in enumerate(bundles) for _ in x.shared]
        access = sp.csr_array((np.ones(len(rows)), (rows, cols)), shape=(len(shared), self.n))
        self.a_ub = sp.vstack([fabric, access], format="csr")
        self.b_ub = np.concatenate([link_cap[fabric_links], link_cap[np.array(shared, dtype=np.int64)]])
        self.bundle_commodity = bundle_commodity = np.array([x.commodity for x in bundles], dtype=np.int64)
        n_c = len(net.commodities)
        self.a_eq = sp.csr_array(
            (
                np.concatenate([-self.count, np.ones(n_p)]),
                (np.concatenate([bundle_commodity, self.path_commodity]), np.arange(1, self.n)),
            ),
            shape=(n_c, self.n),
        )
        self.b_eq = np.zeros(n_c)
        # A path carries no more than its narrowest hop: a bound, not a row.
        self.path_ub = np.array([float(link_cap[p].min()) if len(p) else math.inf for _, p in path_links])
        self.lps = 0
        # For the shortcut: which (bundle, link) pairs a routing of each
        # commodity over its paths loads, and through which path.
        path_ptr = np.cumsum([0, *(len(p) for _, p in path_links)])
        all_links = np.concatenate([p for _, p in path_links] or [np.empty(0, np.int64)])
        link_path = np.repeat(np.arange(n_p), np.diff(path_ptr))
        first = np.searchsorted(self.path_commodity, np.arange(n_c + 1))
        q_rows: list[np.ndarray] = []
        q_cols: list[np.ndarray] = []
        q_path: list[np.ndarray] = []
        for i, bundle in enumerate(bundles):
            lo, hi = path_ptr[first[bundle.commodity]], path_ptr[first[bundle.commodity + 1]]
            q_rows.append(np.full(hi - lo, i))
            q_cols.append(all_links[lo:hi])
            q_path.append(link_path[lo:hi])
            q_rows.append(np.full(len(bundle.shared), i))
            q_cols.append(np.array(bundle.shared, dtype=np.int64))
            q_path.append(np.full(len(bundle.shared), -1))
        self.q_rows = np.concatenate(q_rows or [np.empty(0, np.int64)]).astype(np.int64)
        self.q_cols = np.concatenate(q_cols or [np.empty(0, np.int64)]).astype(np.int64)
        self.q_path = np.concatenate(q_path or [np.empty(0, np.int64)]).astype(np.int64)
        self.n_commodities = n_c

    def fractions(self, x: np.ndarray) -> np.ndarray:
        """Per path, the share of its commodity the LP solution x sends on it
        (an even share where x sends the commodity nothing)."""
        y = x[1 + self.n_bundles :]
        pc = self.path_commodity
        total = np.bincount(pc, y, minlength=self.n_commodities)[pc]
        paths = np.bincount(pc, minlength=self.n_commodities)[pc]
        return np.where(total > SLACK, y / np.maximum(total, SLACK), 1.0 / np.maximum(paths, 1))

    def routing(self, x: np.ndarray) -> sp.csr_array:
        """Bundles x links: each bundle's load per unit of rate when every
        commodity splits over its paths as in the LP solution x."""
        frac = self.fractions(x)
        on_path = self.q_path >= 0
        weight = np.where(on_path, self.count[self.q_rows] * frac[np.where(on_path, self.q_path, 0)], 1.0)
        return sp.csr_array((weight, (self.q_rows, self.q_cols)), shape=(self.n_bundles, len(self.link_cap)))

    def bounds(self, rate_lo: np.ndarray, rate_hi: np.ndarray, t: tuple[float, float] = (0.0, 0.0)) -> np.ndarray:
        lo = np.concatenate([[t[0]], rate_lo, np.zeros(self.n_paths)])
        hi = np.concatenate([[t[1]], rate_hi, self.path_ub])
        return np.column_stack([lo, hi])

    def solve(
        self,
        c: np.ndarray,
        bounds: np.ndarray,
        extra: sp.csr_array | None = None,
        feasible_only: bool = False,
        relaxed: bool = False,
    ):
        """The optimum; None if infeasible and `feasible_only` (a probe)."""
        a_ub, b_ub = self.a_ub, self.b_ub
        if extra is not None:
            a_ub = sp.vstack([extra, a_ub], format="csr")
            b_ub = np.concatenate([np.zeros(extra.shape[0]), b_ub])
        self.lps += 1
        res = linprog(
            c,
            A_ub=a_ub if a_ub.shape[0] else None,
            b_ub=b_ub if a_ub.shape[0] else None,
            A_eq=self.a_eq,
            b_eq=self.b_eq,
            bounds=bounds,
            method="highs",
        )
        if res.status == 2 and feasible_only:
            return None
        if res.status == 2 and not relaxed:
            # Levels carried over from earlier LPs are only as exact as HiGHS's
            # tolerances: give the rates' floors a little more room, once.
            looser = bounds.copy()
            looser[1 : 1 + self.n_bundles, 0] = np.maximum(looser[1 : 1 + self.n_bundles, 0] - TOL, 0.0)
            return self.solve(c, looser, extra, relaxed=True)
        if res.status != 0:
            raise OptimumError(f"HiGHS: {res.message}")
        return res


def progressive_filling(net: Network) -> Filling:
    lp = _Lp(net)
    b = lp.n_bundles
    level = np.zeros(b)
    frozen = lp.cap <= 0
    floor = 0.0  # every unfrozen bundle is at least here
    x = np.zeros(lp.n)
    levels = 0
    for _ in range(4 * b + 8):
        active = np.flatnonzero(~frozen)
        if not len(active):
            break
        # Shortcut: the last solution's routing, rated max-min, may show every
        # unfrozen bundle at its cap or above some level L at once. Then the
        # filling freezes nothing but those capped below L until it reaches L.
        top = _reach(lp, x, frozen, level)
        if top > floor + TOL:
            capped = active[lp.cap[active] <= top]
            level[capped], frozen[capped] = lp.cap[capped], True
            floor = top
            continue
        levels += 1
        t, x, dual, capped, rest = _next_level(lp, frozen, level, active, floor)
        level[capped], frozen[capped] = lp.cap[capped], True
        if not len(rest):
            continue
        blocked = (dual > DUAL_TOL) | (lp.cap[rest] <= t + TOL)
        open_ = rest[~blocked]
        lo = np.where(frozen, np.maximum(level - SLACK, 0.0), max(t - SLACK, 0.0))
        # LP2, until the open bundles split into growing and blocked.
        while len(open_):
            hi = lp.cap.copy()
            hi[open_] = np.minimum(lp.cap[open_], t + GROWTH)
            c = np.zeros(lp.n)
            c[1 + open_] = -1.0
            res = lp.solve(c, lp.bounds(lo, hi))
            x = res.x
            grew = x[1 + open_] > t + TOL
            if not grew.any():
                break
            open_ = open_[~grew]
        blocked_ids = np.concatenate([rest[blocked], open_])
        level[blocked_ids] = t
        frozen[blocked_ids] = True
        floor = t
    else:
        raise OptimumError("progressive filling did not converge")
    # The routing of the last solution carries the final levels (the last
    # step was an LP at them, or the shortcut's proof on that routing).
    sent = np.bincount(lp.bundle_commodity, lp.count * level, minlength=lp.n_commodities)
    merged = lp.fractions(x) * sent[lp.path_commodity]
    real = np.zeros(lp.paths.n_real_paths)
    for total, members in zip(merged, lp.paths.members):
        real[members] = total / len(members)  # a class of vias shares evenly
    real_commodity = np.repeat(np.arange(lp.n_commodities), [len(k.paths) for k in net.commodities])
    return Filling(level, real, real_commodity, lp.lps, levels)


_Level = tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _next_level(lp: _Lp, frozen: np.ndarray, level: np.ndarray, active: np.ndarray, floor: float) -> _Level:
    """(t, solution, duals of the rest's "r >= t" rows, bundles that reach
    their caps first, the rest): the next level of the filling.

    Caps (demands, NIC links) are levels too: with bundles capped at many
    different rates, one LP per cap would cost hundreds of LPs. So: the
    caps in order c_1 < c_2 < ..., and LP(j) holds every bundle capped at
    c_j or below at its cap and raises the rest. LP(j) reaching c_j means the
    filling passes c_j with nothing but caps in its way, and that is
    monotone in j: search the last such j (doubling, then halving)."""
    caps = np.unique(lp.cap[active])

    def probe(j: int) -> _Level | None:
        capped = active[lp.cap[active] <= caps[j - 1]] if j else active[:0]
        rest = active[lp.cap[active] > caps[j - 1]] if j else active
        lo = np.where(frozen, np.maximum(level - SLACK, 0.0), max(floor - SLACK, 0.0))
        lo[capped] = np.maximum(lp.cap[capped] - SLACK, 0.0)
        c = np.zeros(lp.n)
        if not len(rest):
            res = lp.solve(c, lp.bounds(lo, lp.cap), feasible_only=True)
            return None if res is None else (math.inf, res.x, np.empty(0), capped, rest)
        rows = sp.csr_array(
            (
                np.concatenate([np.ones(len(rest)), -np.ones(len(rest))]),
                (np.tile(np.arange(len(rest)), 2), np.concatenate([np.zeros(len(rest), np.int64), 1 + rest])),
            ),
            shape=(len(rest), lp.n),
        )
        c[0] = -1.0
        res = lp.solve(c, lp.bounds(lo, lp.cap, (floor, float(lp.cap[rest].min()))), rows, feasible_only=bool(j))
        if res is None or (j and res.x[0] < caps[j - 1] - TOL):
            return None
        return float(res.x[0]), res.x, -np.asarray(res.ineqlin.marginals[: len(rest)]), capped, rest

    found = probe(0)
    assert found is not None  # LP(0) is always feasible: the last level is
    if found[0] < caps[0] - TOL:
        return found  # a link, not a cap, sets this level
    good, bad, step = 0, len(caps) + 1, 1
    while good + 1 < bad:
        j = min(good + step, bad - 1) if bad > len(caps) else (good + bad) // 2
        tried = probe(j)
        if tried is None:
            bad = j
        else:
            good, found, step = j, tried, step * 2
    return found


def _reach(lp: _Lp, x: np.ndarray, frozen: np.ndarray, level: np.ndarray) -> float:
    """A level L such that one feasible allocation has every frozen bundle at
    its level and every unfrozen one at min(its cap, L): the routing of the
    LP solution x, filled until its first link is full. Such an allocation
    proves that filling up to L blocks nothing but caps. (Frozen levels are
    below the current floor, so below any L worth a jump.)"""
    demand = np.where(frozen, level, lp.cap)
    w = first_full(lp.routing(x), lp.link_cap, demand)
    return math.inf if w >= lp.cap[~frozen].max() else w - SLACK / 2


def max_total(net: Network) -> float:
    """The most the flows can carry together, normalised (no fairness)."""
    lp = _Lp(net)
    if not lp.n_bundles:
        return 0.0
    c = np.zeros(lp.n)
    c[1 : 1 + lp.n_bundles] = -lp.count
    res = lp.solve(c, lp.bounds(np.zeros(lp.n_bundles), lp.cap))
    return float(lp.count @ res.x[1 : 1 + lp.n_bundles])
