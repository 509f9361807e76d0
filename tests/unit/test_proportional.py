"""Proportionally fair rates (emulation/model/proportional.py) against
hand-computed allocations and against a plain convex solve of the same
problem."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp

from emulation.model.fluid import incidence, link_loads, max_min_rates, path_incidence
from emulation.model.proportional import proportional_fair_rates
from emulation.model.sharing import Sharing

INF = math.inf


def rates(paths, capacity, demand=None):
    return proportional_fair_rates(path_incidence(paths, len(capacity)), np.array(capacity, dtype=float), demand)


def test_a_flow_across_two_full_links_gets_a_third_and_the_others_two_thirds():
    # Max-min gives all three half; TCP gives the flow with two bottlenecks less, the others more.
    assert rates([[0, 1], [0], [1]], [1.0, 1.0]) == pytest.approx([1 / 3, 2 / 3, 2 / 3], rel=1e-6)
    assert max_min_rates(path_incidence([[0, 1], [0], [1]], 2), np.array([1.0, 1.0])) == pytest.approx([0.5] * 3)


def test_where_no_flow_crosses_two_full_links_the_max_min_rates_stand():
    # Flow 1 crosses link 1 too, but link 1 is not full.
    assert rates([[0], [0, 1], [1]], [10, 40], [INF, INF, 20]) == pytest.approx([5, 5, 20])
    # A demand cap (UDP) leaves the rest to the elastic flow, as in max-min.
    assert rates([[0], [0]], [10], [3, INF]) == pytest.approx([3, 7])
    # Three senders into one NIC: a third each.
    assert rates([[0, 3], [1, 3], [2, 3]], [400] * 4) == pytest.approx([400 / 3] * 3)


def test_an_all_to_all_is_fair_both_ways():
    # Four NICs, each flow across its sender's and its receiver's: every link full, every flow equal.
    pairs = [(s, d) for s in range(4) for d in range(4) if s != d]
    got = rates([[s, 4 + d] for s, d in pairs], [90.0] * 8)
    assert got == pytest.approx([30.0] * len(pairs), rel=1e-6)


def test_a_dead_link_carries_nothing_and_a_sprayed_flow_counts_its_shares():
    assert rates([[0, 1], [0, 2], [2]], [10, 0, 5]) == pytest.approx([0, 2.5, 2.5], rel=1e-6)
    # Flow 0 half over link 0 and half over link 1, flow 1 on both links whole: each
    # link's price is paid half by flow 0, so it gets twice flow 1's rate (max-min: 2 and 2).
    shares = incidence(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]), np.array([0.5, 0.5, 1.0, 1.0]), 2, 2)
    got = proportional_fair_rates(shares, np.array([3.0, 3.0]))
    assert link_loads(shares, got) == pytest.approx([3.0, 3.0], rel=1e-6)
    assert got == pytest.approx([3.0, 1.5], rel=1e-6)


def _reference(matrix: np.ndarray, capacity: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """The same problem for a general-purpose solver: maximise the sum of logs."""
    start = max_min_rates(sp.csr_matrix(matrix), capacity, demand)
    bounds = [(1e-9, min(d, capacity[row > 0].min())) for row, d in zip(matrix, demand)]
    result = scipy.optimize.minimize(
        lambda x: -np.sum(np.log(x)),
        np.maximum(start, 1e-9),
        jac=lambda x: -1.0 / x,
        method="SLSQP",
        bounds=bounds,
        constraints=[{"type": "ineq", "fun": lambda x: capacity - matrix.T @ x, "jac": lambda x: -matrix.T}],
        options={"maxiter": 1000, "ftol": 1e-14},
    )
    return result.x


@pytest.mark.parametrize("seed", range(4))
def test_random_small_cases_are_feasible_and_as_fair_as_a_plain_convex_solve(seed):
    rng = np.random.default_rng(seed)
    for _ in range(40):
        flows, links = int(rng.integers(2, 12)), int(rng.integers(2, 8))
        matrix = (rng.random((flows, links)) < 0.35).astype(float)
        matrix[np.arange(flows), rng.integers(0, links, flows)] = 1.0
        capacity = rng.uniform(1, 10, links)
        demand = np.where(rng.random(flows) < 0.3, rng.uniform(0.1, 5, flows), INF)
        got = proportional_fair_rates(sp.csr_matrix(matrix), capacity, demand)
        assert np.all(matrix.T @ got <= capacity * (1 + 1e-9))
        assert np.all(got <= demand * (1 + 1e-9))
        utility = np.sum(np.log(got))
        assert utility >= np.sum(np.log(_reference(matrix, capacity, demand))) - 1e-5
        assert utility >= np.sum(np.log(max_min_rates(sp.csr_matrix(matrix), capacity, demand))) - 1e-9


def test_sharing_names_the_model_and_solves_with_it():
    shares, capacity = path_incidence([[0, 1], [0], [1]], 2), np.array([1.0, 1.0])
    assert Sharing("max-min").rates(shares, capacity) == pytest.approx([0.5] * 3)
    assert Sharing("proportional").rates(shares, capacity) == pytest.approx([1 / 3, 2 / 3, 2 / 3], rel=1e-6)
