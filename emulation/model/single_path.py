"""The single-path optimum: the best max-min allocation when every flow takes
exactly one of its equal-cost paths (what per-flow TE can reach). Pure.

Two exact ways, tried in order:
1. Round the splittable optimum: give each commodity's flows whole paths in
   proportion to the LP's split, then rate that routing. If its max-min
   rates equal the splittable optimum's, no single-path routing can do
   better (the splittable one is a bound) and this one is optimal, at any
   scale. A permutation on a fabric with full bisection ends here.
2. Otherwise, on small cases, every routing: interchangeable flows (one
   bundle) only by how many go on each path, so a commodity of k such flows
   over p paths costs C(k+p-1, p-1) routings, not p^k. The lexicographically
   greatest sorted rate vector wins (the max-min order). Groups of flows
   that can share no link are searched apart.
Beyond `limit` routings it is unknown (None): no greedy stand-in, which is no
bound.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from controller.errors import RailyardError
from emulation.model.fair import fill
from emulation.model.lp import TOL, Filling
from emulation.model.network import Network
from emulation.model.symmetry import via_classes

EXHAUSTIVE_LIMIT = 20_000


def flow_rates(net: Network, filling: Filling) -> np.ndarray:
    rates = np.zeros(len(net.flows))
    for bundle, level in zip(net.bundles, filling.level):
        rates[bundle.members] = level
    return rates


def rate_choice(net: Network, choice: np.ndarray) -> np.ndarray:
    """Max-min rates (normalised) when flow i takes its commodity's path
    choice[i] (-1: a dead flow, rate 0)."""
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    for i in np.flatnonzero(choice >= 0):
        links = net.flow_path(int(i), int(choice[i]))
        rows.append(np.full(len(links), i))
        cols.append(links)
    empty = np.empty(0, dtype=np.int64)
    row, col = np.concatenate([empty, *rows]), np.concatenate([empty, *cols])
    incidence = sp.csr_array((np.ones(len(row)), (row, col)), shape=(len(net.flows), len(net.links)))
    demand = np.where(choice >= 0, net.flow_cap, 0.0)
    return fill(incidence, net.link_cap, demand)


def rounded(net: Network, filling: Filling) -> np.ndarray:
    """A single-path routing from the splittable optimum: per commodity, the
    fastest flows first, each onto the path with the most of the LP's flow left."""
    rates = flow_rates(net, filling)
    choice = np.full(len(net.flows), -1, dtype=np.int64)
    n_c = len(net.commodities)
    first = np.searchsorted(filling.path_commodity, np.arange(n_c))
    order = np.argsort(net.flow_commodity, kind="stable")
    edges = np.searchsorted(net.flow_commodity[order], np.arange(n_c + 1))
    for c, commodity in enumerate(net.commodities):
        members = order[edges[c] : edges[c + 1]]
        if len(members):
            _assign(choice, members, rates, filling.path_total[first[c] : first[c] + len(commodity.paths)].copy())
    return choice


def _assign(choice: np.ndarray, members: np.ndarray, rates: np.ndarray, left: np.ndarray) -> None:
    for i in members[np.argsort(-rates[members], kind="stable")]:
        p = int(np.argmax(left))
        choice[i] = p
        left[p] -= rates[i]


def same_rates(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.all(np.abs(np.sort(a) - np.sort(b)) <= TOL))


def lex_greater(a_sorted: np.ndarray, b_sorted: np.ndarray) -> bool:
    """a > b in the max-min order (both sorted ascending), ties within TOL."""
    differ = np.flatnonzero(np.abs(a_sorted - b_sorted) > TOL)
    return bool(len(differ)) and bool(a_sorted[differ[0]] > b_sorted[differ[0]])


def routings(net: Network, part: list[int] | None = None) -> int:
    """How many routings there are, before symmetry: of every bundle, or of the bundles `part`."""
    total = 1
    for bundle in net.bundles if part is None else [net.bundles[b] for b in part]:
        paths = len(net.commodities[bundle.commodity].paths)
        total *= math.comb(len(bundle.members) + paths - 1, paths - 1)
    return total


class Budget(RailyardError):
    """The search would rate more routings than it may."""


def exhaustive(
    net: Network,
    bound: np.ndarray | None = None,
    limit: int = EXHAUSTIVE_LIMIT,
    parts: list[list[int]] | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """(choice, rates) of the best single-path routing, or None past `limit`
    routings rated. Stops early on one that meets `bound` (the splittable
    optimum's rates): nothing beats it.

    Bundles that can share no link (independent_parts) are searched apart:
    the max-min order is separable (with one part's routing fixed, the
    others' compare as they would alone), so the best of each part together
    is the best routing, for the sum of the parts' routings, not their
    product. A permutation's two directions across a three-tier core after
    a core link fails are 1,296 routings each, not 3^16 together.

    Interchangeable vias (symmetry.py) are not tried in every order: bundle
    by bundle, how many flows each via of a class takes must not increase
    along the class, within the vias earlier bundles could not tell apart.
    Any routing can be relabelled to meet that, rates unchanged, so the
    best one is still among those rated. `parts`: independent_parts(net),
    where the caller has them already."""
    classes = via_classes(net) or {}
    sizes = np.bincount(list(classes.values())) if classes else np.zeros(0, dtype=np.int64)
    orbits = limit * math.prod(math.factorial(int(k)) for k in sizes)
    parts = independent_parts(net) if parts is None else parts
    if any(routings(net, part) > orbits for part in parts):
        return None  # more orbits than `limit`, whatever the order of the search
    choice = np.full(len(net.flows), -1, dtype=np.int64)
    budget = [limit]
    try:
        for part in parts:
            members = np.concatenate([net.bundles[b].members for b in part])
            choice[members] = _search(net, part, members, classes, bound, budget)
    except Budget:
        return None
    return choice, rate_choice(net, choice)


def independent_parts(net: Network) -> list[list[int]]:
    """The bundles (indices) in groups whose flows can share no link on any
    of their paths, NIC links included."""
    if not net.bundles:
        return []
    pairs = [
        (b, int(link))
        for b, bundle in enumerate(net.bundles)
        for i in bundle.members.tolist()
        for p in range(len(net.commodities[bundle.commodity].paths))
        for link in net.flow_path(i, p).tolist()
    ]
    rows, cols = np.array(pairs, dtype=np.int64).T
    n = len(net.bundles)
    graph = sp.coo_array((np.ones(len(rows)), (rows, n + cols)), shape=(n + len(net.links),) * 2)
    _, label = connected_components(graph, directed=False)
    parts: dict[int, list[int]] = {}
    for b in range(n):
        parts.setdefault(int(label[b]), []).append(b)
    return list(parts.values())


def _search(
    net: Network,
    part: list[int],
    members: np.ndarray,
    classes: dict[str, int],
    bound: np.ndarray | None,
    budget: list[int],
) -> np.ndarray:
    """The best routing of the bundles `part`, whose flows are `members`
    (the other flows off): which path each member takes. Spends
    `budget[0]`; Budget past it."""
    target = np.sort(bound[members]) if bound is not None else None
    choice = np.full(len(net.flows), -1, dtype=np.int64)
    best: list = [None, np.empty(0)]
    start: dict[int, tuple[tuple[str, ...], ...]] = {}
    for via, cls in sorted(classes.items()):
        start[cls] = ((*start.get(cls, ((),))[0], via),)

    def visit(k: int, cells: dict[int, tuple[tuple[str, ...], ...]]) -> bool:
        if k == len(part):
            budget[0] -= 1
            if budget[0] < 0:
                raise Budget
            ordered = np.sort(rate_choice(net, choice)[members])
            if best[0] is None or lex_greater(ordered, best[1]):
                best[0], best[1] = choice.copy(), ordered
                return target is not None and not lex_greater(target, ordered)
            return False
        bundle = net.bundles[part[k]]
        vias = net.commodities[bundle.commodity].vias
        for paths in _spread(len(bundle.members), len(vias)):
            counts = dict(zip(vias, np.bincount(paths, minlength=len(vias)).tolist()))
            refined = _refine(cells, counts)
            if refined is None:
                continue
            choice[bundle.members] = paths
            if visit(k + 1, refined):
                return True
        return False

    visit(0, start)
    out: np.ndarray = best[0][members]
    return out


def _refine(
    cells: dict[int, tuple[tuple[str, ...], ...]], counts: dict[str, int]
) -> dict[int, tuple[tuple[str, ...], ...]] | None:
    """The cells split by this bundle's counts, or None if the counts rise
    along a cell (a relabelling of a routing already covered)."""
    out = {}
    for cls, parts in cells.items():
        split: list[tuple[str, ...]] = []
        for cell in parts:
            n = [counts.get(v, 0) for v in cell]
            if any(a < b for a, b in itertools.pairwise(n)):
                return None
            run: list[str] = []
            for v, c, prev in zip(cell, n, [None, *n]):
                if run and c != prev:
                    split.append(tuple(run))
                    run = []
                run.append(v)
            split.append(tuple(run))
        out[cls] = tuple(split)
    return out


def _spread(k: int, paths: int) -> Iterator[np.ndarray]:
    """Every way to put k interchangeable flows on `paths` paths: which path each takes."""
    for cut in itertools.combinations(range(k + paths - 1), paths - 1):
        counts = np.diff([-1, *cut, k + paths - 1]) - 1
        yield np.repeat(np.arange(paths), counts)
