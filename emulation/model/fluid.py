"""Max-min fair rates on a flow-level (fluid) model, vectorised. Pure.

Flows run on fixed routes over links (egress ports). A flow may be split
over several paths with fixed weights (ideal packet spraying sends a flow
evenly over all its equal-cost paths), so the model is a sparse flow x link
incidence matrix `A`: `A[f, l]` is the share of flow f's rate that crosses
link l (1 for a single path; 1/n on each of n sprayed paths, summed where
they share a link). A flow's rate is one number; its load on link l is
`rate[f] * A[f, l]`.

Rates follow progressive filling (water-filling): every unfrozen flow grows
at the same pace until a link fills (or the flow reaches its own demand,
e.g. a UDP sending rate; TCP is elastic: infinite demand); flows crossing a
full link freeze; repeat. Each round is two sparse matrix-vector products
and a few vector operations, and there are as many rounds as there are
distinct bottleneck levels (a handful for the collectives and permutations
of a training fabric), so 16k flows over 64k links solve in milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

# A link counts as full when less than this fraction of its capacity is left.
REL_TOL = 1e-9
# The rounds' working copy is cut down once fewer than this share of its flows are still growing.
COMPACT_BELOW = 0.7


def incidence(
    flow_index: np.ndarray, link_index: np.ndarray, weight: np.ndarray, n_flows: int, n_links: int
) -> sp.csr_matrix:
    """The flow x link share matrix from (flow, link, weight) triples;
    triples naming the same (flow, link) add up (sprayed paths sharing the
    flow's NIC, say)."""
    matrix = sp.coo_matrix(
        (np.asarray(weight, dtype=float), (np.asarray(flow_index), np.asarray(link_index))),
        shape=(n_flows, n_links),
    ).tocsr()
    matrix.sum_duplicates()
    return matrix


def path_incidence(paths: Sequence[Sequence[int]], n_links: int) -> sp.csr_matrix:
    """Single-path flows given as lists of link indices (a convenience for small cases)."""
    lengths = np.fromiter((len(p) for p in paths), dtype=np.int64, count=len(paths))
    links = np.fromiter((link for p in paths for link in p), dtype=np.int64, count=int(lengths.sum()))
    flows = np.repeat(np.arange(len(paths)), lengths)
    return incidence(flows, links, np.ones(len(links)), len(paths), n_links)


def max_min_rates(
    shares: sp.spmatrix, capacity: np.ndarray, demand: np.ndarray | Sequence[float] | None = None
) -> np.ndarray:
    """Max-min fair rates by progressive filling.

    shares: flow x link incidence (`incidence`), non-negative.
    capacity: per link, >= 0 (a dead link is 0: flows crossing it get 0).
    demand: per flow cap (inf for elastic flows); None: all elastic.
    A flow that crosses no link and has no finite demand is unbounded: ValueError.
    """
    a = sp.csr_matrix(shares, dtype=float)
    n_flows, n_links = a.shape
    capacity = np.asarray(capacity, dtype=float)
    if capacity.shape != (n_links,):
        raise ValueError(f"capacity has shape {capacity.shape}; the incidence has {n_links} links")
    cap_demand = np.full(n_flows, np.inf) if demand is None else np.asarray(demand, dtype=float)
    if cap_demand.shape != (n_flows,):
        raise ValueError(f"demand has shape {cap_demand.shape}; the incidence has {n_flows} flows")
    crosses_any = np.diff(a.indptr) > 0
    if np.any(~crosses_any & np.isinf(cap_demand)):
        raise ValueError("a flow with infinite demand crosses no link: its rate is unbounded")

    rate = np.zeros(n_flows)
    remaining = capacity.copy()
    full = remaining <= REL_TOL * np.maximum(capacity, 1.0)
    # Flows on a link that is full from the start (a dead link) never grow.
    active = (cap_demand > 0) & ~(a @ full.astype(float) > 0)
    # Every unfrozen flow is at the same rate, the water level; the rounds work
    # on a compacted copy of the problem (the unfrozen flows and the links
    # they cross), cut again whenever a good part of it has frozen.
    level = 0.0
    flows = np.flatnonzero(active)
    while flows.size:
        sub = a[flows]
        links = np.flatnonzero(np.bincount(sub.indices, minlength=n_links))
        sub = sub[:, links]
        sub_t = sub.T.tocsr()
        left = remaining[links]
        tolerance = REL_TOL * np.maximum(capacity[links], 1.0)
        sub_demand = cap_demand[flows]
        live = np.ones(flows.size, dtype=bool)
        count = flows.size
        while count > COMPACT_BELOW * flows.size:
            livef = live.astype(float)
            weight = sub_t @ livef  # per link: load growth per unit of level growth
            ratio = np.divide(left, weight, out=np.full(links.size, np.inf), where=weight > 0)
            link_step = ratio.min()
            demand_step = np.where(live, sub_demand, np.inf).min() - level
            step = max(min(link_step, demand_step), 0.0)
            if not np.isfinite(step):
                raise ValueError("unbounded rates: an active flow has infinite demand and no finite link")
            level += step
            left -= step * weight
            hit = (weight > 0) & (left <= tolerance + REL_TOL * step * weight)
            if link_step <= demand_step:
                hit[np.argmin(ratio)] = True  # the bottleneck is full, whatever the rounding said
            left[hit] = 0.0
            frozen = live & ((sub @ hit.astype(float) > 0) | (sub_demand <= level + REL_TOL * max(level, 1.0)))
            rate[flows[frozen]] = np.minimum(level, sub_demand[frozen])
            live &= ~frozen
            count -= int(frozen.sum())
        remaining[links] = left
        flows = flows[live]
    return rate


def link_loads(shares: sp.spmatrix, rates: np.ndarray) -> np.ndarray:
    """Load per link of flows at `rates`."""
    return np.asarray(shares.T @ rates).ravel()
