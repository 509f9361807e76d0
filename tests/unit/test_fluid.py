"""The vectorised fluid model (emulation/model/fluid.py) against hand-computed
max-min allocations and against independent implementations."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from emulation.model import optimum
from emulation.model.fluid import incidence, link_loads, max_min_rates, path_incidence

INF = math.inf


def rates(paths, capacity, demand=None):
    return max_min_rates(path_incidence(paths, len(capacity)), np.array(capacity, dtype=float), demand).tolist()


def test_textbook_cases():
    # Link 0 (10) carries flows 0 and 1; link 1 (4) carries flow 1 only: 1 gets 4, 0 the rest of link 0.
    assert rates([[0], [0, 1]], [10, 4]) == pytest.approx([6, 4])
    # A demand cap (UDP) leaves the rest to the elastic flow.
    assert rates([[0], [0]], [10], [3, INF]) == pytest.approx([3, 7])
    # Three flows into one NIC (link 3) from three senders (links 0-2): a third each.
    assert rates([[0, 3], [1, 3], [2, 3]], [400, 400, 400, 400]) == pytest.approx([400 / 3] * 3)
    # Two bottleneck levels: link 0 (6) shared by three flows, flow 2 also alone on link 1 (10), flow 3 only on 1.
    assert rates([[0], [0], [0, 1], [1]], [6, 10]) == pytest.approx([2, 2, 2, 8])


def test_a_flow_split_over_two_paths():
    # Flow 0 sends half over link 0, half over link 1; flow 1 uses link 0 only.
    # Link 0 fills when 0.5x + x = 10: both at 20/3, link 1 left at 10/3 used.
    shares = incidence(np.array([0, 0, 1]), np.array([0, 1, 0]), np.array([0.5, 0.5, 1.0]), 2, 2)
    got = max_min_rates(shares, np.array([10.0, 10.0]))
    assert got == pytest.approx([20 / 3, 20 / 3])
    assert link_loads(shares, got) == pytest.approx([10, 10 / 3])
    # Same, and flow 2 alone on link 1 (link 0 now 4): link 0 fills at 8/3 for flows 0 and 1;
    # link 1 then has 10 - 1.5 x 8/3 = 6 left, all flow 2's: it ends at 8/3 + 6.
    shares = incidence(np.array([0, 0, 1, 2]), np.array([0, 1, 0, 1]), np.array([0.5, 0.5, 1.0, 1.0]), 3, 2)
    assert max_min_rates(shares, np.array([4.0, 10.0])) == pytest.approx([8 / 3, 8 / 3, 8 / 3 + 6])


def test_split_shares_on_one_link_add_up():
    # A flow sprayed over two paths that share its NIC link (0): the NIC carries all of it.
    shares = incidence(np.array([0, 0, 0, 0]), np.array([0, 1, 0, 2]), np.array([0.5, 0.5, 0.5, 0.5]), 1, 3)
    assert shares.toarray().tolist() == [[1.0, 0.5, 0.5]]
    assert max_min_rates(shares, np.array([400.0, 400.0, 400.0])) == pytest.approx([400])


def test_a_dead_link_carries_nothing_and_spares_the_rest():
    assert rates([[0, 1], [0], [2]], [10, 0, 5]) == pytest.approx([0, 10, 5])


def test_zero_demand_and_unbounded_flows():
    assert rates([[0], [0]], [10], [0, INF]) == pytest.approx([0, 10])
    with pytest.raises(ValueError, match="unbounded"):
        max_min_rates(path_incidence([[]], 1), np.array([1.0]))
    with pytest.raises(ValueError, match="capacity"):
        max_min_rates(path_incidence([[0]], 1), np.array([1.0, 2.0]))


def _reference(capacity, paths, demands):
    """Progressive filling written the plain way (one flow, one link at a time)."""
    n = len(paths)
    got, frozen, remaining = [0.0] * n, [False] * n, dict(capacity)
    frozen = [demands[i] <= 0 or any(capacity[e] <= 0 for e in paths[i]) for i in range(n)]
    while not all(frozen):
        active = [i for i in range(n) if not frozen[i]]
        users: dict = {}
        for i in active:
            for e in paths[i]:
                users.setdefault(e, []).append(i)
        step = min([remaining[e] / len(u) for e, u in users.items()] + [demands[i] - got[i] for i in active])
        for i in active:
            got[i] += step
            for e in paths[i]:
                remaining[e] -= step
        for i in active:
            if got[i] >= demands[i] - 1e-9 or any(remaining[e] <= 1e-9 for e in paths[i]):
                frozen[i] = True
    return got


@pytest.mark.parametrize("seed", range(40))
def test_random_small_cases_agree_with_the_optimum_modules_filling_and_a_plain_reference(seed):
    rng = random.Random(seed)
    links = rng.randint(1, 8)
    capacity = {j: rng.choice([0.0, 1.0, 2.0, 10.0, round(rng.uniform(0.5, 5), 3)]) for j in range(links)}
    paths = [rng.sample(range(links), rng.randint(1, min(4, links))) for _ in range(rng.randint(1, 12))]
    demands = [rng.choice([INF, round(rng.uniform(0.1, 3), 3), 0.0]) for _ in paths]
    got = rates(paths, [capacity[j] for j in range(links)], demands)
    assert got == pytest.approx(optimum.max_min_rates(capacity, paths, demands), abs=1e-9)
    assert got == pytest.approx(_reference(capacity, paths, demands), abs=1e-9)


def test_max_min_properties_on_a_larger_random_instance():
    # Feasible, and every flow is either at its demand or crosses a full
    # link where no other flow gets more (the max-min condition).
    rng = np.random.default_rng(7)
    n, m = 3000, 800
    flows = np.repeat(np.arange(n), 3)
    links = rng.integers(0, m, 3 * n)
    shares = incidence(flows, links, np.ones(3 * n), n, m)
    capacity = rng.uniform(1, 100, m)
    demand = np.where(rng.random(n) < 0.2, rng.uniform(0.01, 1, n), INF)
    got = max_min_rates(shares, capacity, demand)
    load = link_loads(shares, got)
    assert np.all(load <= capacity * (1 + 1e-7))
    full = load >= capacity * (1 - 1e-7)
    dense = shares.toarray() > 0
    for f in range(n):
        if got[f] >= demand[f] * (1 - 1e-9):
            continue
        bottlenecks = [j for j in np.flatnonzero(dense[f]) if full[j]]
        assert bottlenecks, f"flow {f} is neither at its demand nor on a full link"
        assert any(got[f] >= got[dense[:, j]].max() * (1 - 1e-7) for j in bottlenecks)
