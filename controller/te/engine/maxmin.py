"""Max-min fair rates of flows on fixed paths, each path a row of link ids:
what a routing would give its elephants, by which a plan of moves is
judged. Pure, numpy only (the daemon does not need scipy).

Progressive filling, with every bottleneck of a round frozen at once:
the flows through a link whose even share is the least any of them could
get anywhere freeze at that share, each remembering the link as its
bottleneck; repeat (_bottlenecked). It ends at the same rates as raising
one level at a time (emulation.model.fair, over a sparse incidence, for
paths split in shares), in as many rounds as bottlenecks are deep rather
than one per distinct rate.
"""

from __future__ import annotations

import numpy as np

REL_TOL = 1e-9  # "this link is full", "this flow has its cap": far above rounding, far below a rate


def fill_paths(hops: np.ndarray, capacity: np.ndarray, cap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rates, bottleneck) of flows `hops` (F, H): link ids into `capacity`,
    a row padded with any id of infinite capacity; `cap`: each flow's most
    (inf: elastic). `bottleneck`: per flow the link that froze it, -1 where
    its cap did (or nothing limits it: rate inf)."""
    n = len(hops)
    if not n:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    cap = np.asarray(cap, dtype=float)
    if len(capacity) <= 4 * hops.size:
        return _fill(hops, capacity.astype(float), cap)
    # Over the links these flows cross only: a plan's component is a few
    # dozen links of a fabric of thousands.
    links, local = np.unique(hops, return_inverse=True)
    local = local.reshape(hops.shape)
    rate, bottleneck = _fill(local, capacity[links].astype(float), cap)
    return rate, np.where(bottleneck >= 0, links[np.maximum(bottleneck, 0)], -1)


def _fill(hops: np.ndarray, capacity: np.ndarray, cap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, size = len(hops), len(capacity)
    rate = np.zeros(n)
    bottleneck = np.full(n, -1, dtype=np.int64)
    finite = np.isfinite(capacity)
    remaining = np.where(finite, capacity, np.inf)
    remaining[remaining <= REL_TOL * np.where(finite, capacity, 0.0)] = 0.0  # full already
    active = np.flatnonzero(cap > 0)
    old = np.seterr(divide="ignore", invalid="ignore")
    try:
        while len(active):
            frozen, at_rate, by = _bottlenecked(hops[active], remaining, cap[active])
            done = active[frozen]
            rate[done], bottleneck[done] = at_rate, by
            limited = np.isfinite(at_rate)
            taken = np.repeat(at_rate[limited], hops.shape[1])
            remaining -= np.bincount(hops[done[limited]].ravel(), taken, size)
            np.maximum(remaining, 0.0, out=remaining)
            active = active[~frozen]
    finally:
        np.seterr(**old)
    return rate, bottleneck


def _bottlenecked(
    hops: np.ndarray, remaining: np.ndarray, cap: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One round over the unfrozen flows `hops`: (which freeze, at what
    rate, on which link, -1 for their cap or nothing). Whatever freezes
    elsewhere first only grows a link's share, so a link whose share no flow
    on it could beat elsewhere ends at exactly that share; the least share
    of all is always one such link, so every round freezes something. At
    16K flows, each on a NIC a little less loaded than the next, this is a
    few rounds where one level at a time took hundreds."""
    size = len(remaining)
    count = np.bincount(hops.ravel(), minlength=size)
    share = np.where(count > 0, remaining / count, np.inf)
    on = share[hops]
    best = np.minimum(on.min(axis=1), cap)  # what each flow could get: its tightest link's share, or its cap
    slack = best * (1 + REL_TOL)
    beaten = np.bincount(hops[on > slack[:, None]], minlength=size) > 0  # a flow here could get less elsewhere
    limited = np.isfinite(best)
    at_link = ~beaten[hops] & limited[:, None]
    by_link = at_link.any(axis=1)
    frozen = by_link | (cap <= slack) | ~limited
    link = np.where(by_link, hops[np.arange(len(hops)), at_link.argmax(axis=1)], -1)
    return frozen, best[frozen], link[frozen]


def lex_gain(before: np.ndarray, after: np.ndarray, tolerance: float) -> float:
    """How much `after` beats `before` in the max-min order: the two rate
    vectors (the same flows) sorted ascending, the difference at the first
    place they differ by more than `tolerance` (positive: after is fairer;
    0: equal within it)."""
    a, b = np.sort(before), np.sort(after)
    differ = np.flatnonzero(np.abs(b - a) > tolerance)
    return float(b[differ[0]] - a[differ[0]]) if len(differ) else 0.0
