"""Max-min fair rates of flows on fixed paths, each path a row of link ids:
what a routing would give its elephants, by which a plan of moves is
judged. Pure, numpy only (the daemon does not need scipy).

Progressive filling: every unfrozen flow grows at one pace until a link it
crosses runs out or it reaches its cap; the flows through that link
freeze, each remembering it as its bottleneck; repeat. One round per
distinct rate level, each a bincount over the unfrozen flows' links.
(emulation.model.fair does the same over a sparse incidence, for paths
split in shares; the engine's paths are whole.)
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
    full_at = REL_TOL * np.where(finite, capacity, 0.0)
    active = cap > 0
    dead = (remaining <= full_at)[hops].any(axis=1) & active
    bottleneck[dead] = _first(hops[dead], remaining <= full_at)
    active &= ~dead
    level = 0.0  # every active flow's rate: they all grow together from 0
    old = np.seterr(divide="ignore", invalid="ignore")
    try:
        while active.any():
            count = np.bincount(hops[active].ravel(), minlength=size)
            used = count > 0
            share = np.where(used, remaining / count, np.inf)
            link_step = float(share.min())
            flow_step = float(cap[active].min()) - level
            step = max(min(link_step, flow_step), 0.0)
            if not np.isfinite(step):  # nothing limits them
                rate[active] = np.inf
                break
            level += step
            rate[active] = level
            remaining[used] -= step * count[used]
            full = used & (remaining <= full_at)
            if link_step <= flow_step:  # the links that set the step are full, rounding or not
                full |= used & (share <= link_step * (1 + REL_TOL))
            hit = active & full[hops].any(axis=1)
            bottleneck[hit] = _first(hops[hit], full)
            active &= ~(hit | (cap <= level * (1 + REL_TOL)))
    finally:
        np.seterr(**old)
    return rate, bottleneck


def _first(hops: np.ndarray, full: np.ndarray) -> np.ndarray:
    """Per row of `hops`, its first link that is `full`."""
    on = full[hops]
    return hops[np.arange(len(hops)), on.argmax(axis=1)] if len(hops) else np.zeros(0, dtype=np.int64)


def lex_gain(before: np.ndarray, after: np.ndarray, tolerance: float) -> float:
    """How much `after` beats `before` in the max-min order: the two rate
    vectors (the same flows) sorted ascending, the difference at the first
    place they differ by more than `tolerance` (positive: after is fairer;
    0: equal within it)."""
    a, b = np.sort(before), np.sort(after)
    differ = np.flatnonzero(np.abs(b - a) > tolerance)
    return float(b[differ[0]] - a[differ[0]]) if len(differ) else 0.0
