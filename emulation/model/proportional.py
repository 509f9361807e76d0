"""Proportionally fair rates on the fluid model: how TCP shares a fabric. Pure.

Max-min fairness (`fluid.max_min_rates`) is the definition every optimum
here uses, but it is not what a window- or ECN-driven transport converges
to. Congestion control of the AIMD family, where a flow backs off on the
loss or mark of any link it crosses, approximates proportional fairness:
the rates that maximise the sum of the logs of the flows' rates within the
links' capacities (Kelly, Maulloo and Tan, 1998). The two differ where a
flow crosses two or more full links: max-min gives it the same share as a
flow with one bottleneck, TCP gives it less and the others more. That is
the emulation's ECMP above the fluid model's on Hedera's bijections (up to
6 points where one collided core link carries flows that are also
collided elsewhere).

The rates come from the dual, one price per link: a flow's rate is one over
the sum of its links' prices (capped by its demand), and the prices that
minimise the dual make every priced link full. L-BFGS-B minimises it from
the max-min rates' own prices, each step two sparse matrix-vector products.
Where no flow crosses two full links, the max-min rates are already
proportionally fair, and they are returned as they are.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.optimize
import scipy.sparse as sp

from emulation.model.fluid import REL_TOL, link_loads, max_min_rates

# The dual's relative gradient tolerance: every link within about this fraction of its capacity.
GRADIENT_TOL = 1e-9


def proportional_fair_rates(
    shares: sp.spmatrix, capacity: np.ndarray, demand: np.ndarray | Sequence[float] | None = None
) -> np.ndarray:
    """Proportionally fair rates, with the arguments and checks of
    `max_min_rates` (dead links give their flows 0, demands cap rates)."""
    a = sp.csr_matrix(shares, dtype=float)
    capacity = np.asarray(capacity, dtype=float)
    fair = max_min_rates(a, capacity, demand)
    cap_demand = np.full(a.shape[0], np.inf) if demand is None else np.asarray(demand, dtype=float)
    full = link_loads(a, fair) >= capacity * (1 - 1e-6)
    flows = np.flatnonzero(fair > 0)
    crossings = np.asarray(a[flows] @ full.astype(float)).ravel() if flows.size else np.zeros(0)
    if not np.any(crossings >= 2):
        return fair
    sub = a[flows]
    links = np.flatnonzero(np.bincount(sub.indices, minlength=a.shape[1]))
    rates = _solve_dual(sub[:, links], capacity[links], cap_demand[flows], fair[flows], full[links])
    out = fair.copy()
    out[flows] = rates
    return out


def _solve_dual(
    a: sp.csr_matrix, capacity: np.ndarray, demand: np.ndarray, start: np.ndarray, full: np.ndarray
) -> np.ndarray:
    """Minimise the dual over link prices >= 0, in units of the largest
    capacity. Each flow's rate is capped by its demand and by its narrowest
    link, so the dual is finite at every price."""
    unit = capacity.max()
    c = capacity / unit
    a_t = a.T.tocsr()
    cap = np.minimum(demand / unit, 1.0 / _row_max(a, 1.0 / c))

    def dual(price: np.ndarray) -> tuple[float, np.ndarray]:
        q = a @ price
        capped = q * cap <= 1.0
        q_free = np.where(capped, 1.0, q)
        rate = np.where(capped, cap, 1.0 / q_free)
        value = c @ price + np.sum(np.where(capped, np.log(cap) - q * cap, -np.log(q_free) - 1.0))
        return float(value), c - a_t @ rate

    # From the max-min rates' prices: a full link's is one over the fastest
    # flow through it, shared among the full links such a flow crosses (exact
    # where the max-min rates are already proportionally fair, an all-to-all's).
    fastest = _row_max(a_t, start / unit)
    crossed = a_t @ (a @ full.astype(float)) / np.maximum(a_t @ np.ones(a.shape[0]), 1.0)
    first = np.where(full & (fastest > 0), 1.0 / np.maximum(fastest * np.maximum(crossed, 1.0), REL_TOL), 0.0)
    result = scipy.optimize.minimize(
        dual,
        first,
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.0, None)] * len(c),
        options={"gtol": GRADIENT_TOL, "ftol": 1e-15, "maxiter": 2000, "maxcor": 20},
    )
    rate = np.minimum(cap, 1.0 / np.maximum(a @ result.x, 1e-300))
    # The optimiser stops a hair from the optimum: each flow scaled down by its most overloaded link.
    overload = link_loads(a, rate) / c
    picked = rate / np.maximum(_row_max(_on_links(a, overload), None), 1.0)
    # Both are feasible; keep the fairer, should the optimiser have stopped short.
    if np.sum(np.log(picked)) < np.sum(np.log(start / unit)):
        picked = start / unit
    return picked * unit


def _on_links(a: sp.csr_matrix, per_link: np.ndarray) -> sp.csr_matrix:
    """`a`'s pattern, each entry holding its link's value."""
    out = a.copy()
    out.data = per_link[a.indices].astype(float)
    return out


def _row_max(m: sp.csr_matrix, weights: np.ndarray | None) -> np.ndarray:
    """Per row, the largest entry (each first scaled by its column's
    weight, if given); 0 for an empty row."""
    data = m.data if weights is None else m.data * weights[m.indices]
    out = np.zeros(m.shape[0])
    rows = np.flatnonzero(np.diff(m.indptr) > 0)
    if rows.size:
        out[rows] = np.maximum.reduceat(data, m.indptr[rows])
    return out
