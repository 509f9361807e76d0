"""An exact search for small fleets, before the annealer: the routes of the
elephants free to move that load the links least beyond their capacities
by demand, then move the fewest of them, as a mixed-integer program (HiGHS,
through scipy.optimize.milp).

The annealer walks, and can stop a move short of a routing with no link
over: on Hedera's randbij1 (seed 3, emulated) its plan of three fixed two
of three shared links and spent the path changes the third needed, which
then stayed shared for the run. A solver proves there is no such routing
among the free elephants, or finds it, in milliseconds at this size. Its
result is a candidate like the annealer's: the planner makes it only if the
max-min rates of every flow say it is better (plan.Planner.evaluate). Pure.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from controller.te.engine.plan import Planner

# (elephant, route) choices a search may weigh: a k=4 fat tree's 16 elephants
# make 64; beyond, the annealer alone, as before.
MAX_CHOICES = 1024
# A guard on a cycle's time: a fat tree's permutations solve in milliseconds,
# but five flows per host (Hedera's randx5, 330 columns) spent a second at
# the root alone, in every cycle whose inputs were new, and an emulated TE
# cycle took seconds. A search cut short offers its best routing so far,
# and the annealer follows if that is not worth making.
TIME_LIMIT_S = 0.25
# Of the free elephants' mean demand, per elephant moved: what an overload
# must shrink by for a move to be worth making (as the annealer's cost).
MOVE_COST = 0.01


def exact(planner: Planner, movable: np.ndarray) -> tuple[tuple[int, int], ...] | None:
    """Moves (elephant, route as a row of its routes) to the routing of the
    movable elephants with the least overload by demand, then the fewest
    moves; () if the routing now is that; None if the instance is too large
    or the solver did not finish (the annealer then searches)."""
    fleet = planner.fleet
    free = np.flatnonzero(movable & (fleet.rows >= 0) & (fleet.nroutes > 1))
    if not len(free):
        return ()
    routes = [planner.live_rows(int(i)) for i in free]
    count = np.array([len(r) for r in routes])
    if int(count.sum()) > MAX_CHOICES:
        return None
    index = fleet.index
    table, pad = index.table(), index.pad
    demand = fleet.bps[:, 0]
    placed = np.flatnonzero(fleet.rows >= 0)
    fixed = index.loads(fleet.rows[placed], demand[placed]) - index.loads(fleet.rows[free], demand[free])
    rows = np.concatenate([np.asarray(r) for r in routes])
    owner = np.repeat(np.arange(len(free)), count)
    hops = table[rows]
    links = np.unique(hops[hops != pad])
    scale = float(np.mean(demand[free])) or 1.0
    n, m = len(rows), len(links)

    # Columns: a binary per choice, then a non-negative overload per link.
    pick = sp.csr_array((np.ones(n), (owner, np.arange(n))), shape=(len(free), n + m))
    choice, at = np.nonzero(hops != pad)
    link_row = np.searchsorted(links, hops[choice, at])
    load = sp.csr_array(
        (
            np.concatenate([demand[free][owner[choice]] / scale, -np.ones(m)]),
            (np.concatenate([link_row, np.arange(m)]), np.concatenate([choice, n + np.arange(m)])),
        ),
        shape=(m, n + m),
    )
    room = (planner.capacity[links] - fixed[links]) / scale
    moved = np.ones(n)
    moved[np.concatenate([[0], np.cumsum(count)[:-1]])] = 0.0  # each elephant's own route comes first
    result = milp(
        c=np.concatenate([MOVE_COST * moved, np.ones(m)]),
        constraints=[LinearConstraint(pick, 1, 1), LinearConstraint(load, -np.inf, room)],
        integrality=np.concatenate([np.ones(n), np.zeros(m)]),
        bounds=Bounds(0, np.concatenate([np.ones(n), np.full(m, np.inf)])),
        options={"time_limit": TIME_LIMIT_S},
    )
    if result.x is None:  # no routing found in time (a cut-short search keeps its best so far)
        return None
    chosen = rows[np.flatnonzero(result.x[:n] > 0.5)]
    return tuple((int(i), int(row - fleet.base[i])) for i, row in zip(free, chosen) if row != fleet.rows[i])


def premature(
    planner: Planner,
    movable: np.ndarray,
    waiting: np.ndarray,
    last: np.ndarray,
    moves: tuple[tuple[int, int], ...],
) -> bool:
    """The plan `moves` spends some flow's last path change (`last`) on a
    routing worse than the one the flows still resting after a move
    (`waiting`) would allow once they may move too: made now, the flows it
    spends are fixed for good where the better routing needs them
    elsewhere. Hedera's randbij1 (seed 2, emulated): a plan of four, 3.1 s
    in, spent two flows' second change while three flows moved 0.1-0.3 s
    after them were still resting; with those two where it left them, no
    routing without a shared link was left, and the run read 91.8%. Waiting
    costs the flows in trouble at most `hysteresis_s`."""
    if not waiting.any() or not any(last[i] for i, _ in moves):
        return False
    wider = exact(planner, movable | waiting)
    return wider is not None and overload(planner, wider) < overload(planner, moves) - planner.tolerance


def overload(planner: Planner, moves: tuple[tuple[int, int], ...]) -> float:
    """What the elephants load the links beyond their capacities by demand,
    with `moves` made (exact's objective, but for its cost of a move)."""
    fleet = planner.fleet
    rows = fleet.rows.copy()
    for i, row in moves:
        rows[i] = fleet.base[i] + row
    placed = np.flatnonzero(rows >= 0)
    loads = fleet.index.loads(rows[placed], fleet.bps[placed, 0])
    return float(np.maximum(loads - planner.capacity, 0.0).sum())
