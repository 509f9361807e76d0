"""Simulated annealing over the squeezed elephants' routes, for what plans
of two moves cannot free: a permutation on a rearrangeable fabric whose
fix is a chain of three moves or more, each alone gaining nothing.

As Hedera's annealer, it minimizes what the routes load beyond the links'
capacities by the elephants' demands (Hedera's estimate, NIC-limited, so a
NIC shared by several flows is no overload), moving one elephant at a
time, a worse state accepted with the Metropolis probability at a
temperature that falls geometrically. Unlike Hedera's:
- the overload counts squared, so that two links over by one flow each
  beat one over by two: every step that spreads a pile-up is downhill,
  where a flat count leaves the annealer to wander;
- most steps move an elephant off a link that is over, not any elephant;
- a state pays a little for every elephant off the route it has now, and
  the moves the coolest state does not need are undone at the end: each
  is a path change;
- its result is only a candidate: the planner makes it only if the
  max-min rates of every flow say it is better (plan.Planner.evaluate).
Seeded: the same inputs and seed give the same plan. Pure.
"""

from __future__ import annotations

import math

import numpy as np

from controller.te.engine.plan import Planner

STEPS_PER_CHOICE = 200  # steps per (elephant, route) choice: a fat tree's permutation may need a chain of eight
MAX_STEPS = 30_000
HOT_PICKS = 0.8  # of the steps move an elephant off a link that is over
MOVE_COST = 0.01  # of the mean demand, squared, per elephant off its route: fewer moves among equals
START_TEMPERATURE = 0.5  # of the mean demand, squared
END_TEMPERATURE = 1e-3


class _State:
    """The annealer's routing in plain Python (a step touches a handful of
    links): loads by demand, the free elephants on each link, the links over."""

    def __init__(self, planner: Planner, free: np.ndarray) -> None:
        fleet = planner.fleet
        table, pad = fleet.index.table(), fleet.index.pad
        self.demand = fleet.bps[:, 0].tolist()
        placed = np.flatnonzero(fleet.rows >= 0)
        self.loads = fleet.index.loads(fleet.rows[placed], fleet.bps[placed, 0]).tolist()
        self.cap = planner.capacity.tolist()
        self.free = free.tolist()
        self.routes = [planner.live_rows(i) for i in self.free]
        self.hops = {row: [h for h in table[row].tolist() if h != pad] for r in self.routes for row in r}
        self.start = [r[0] for r in self.routes]
        self.now = list(self.start)
        self.on: dict[int, set[int]] = {}  # link -> positions (in free) of the elephants on it
        for k, row in enumerate(self.now):
            for h in self.hops[row]:
                self.on.setdefault(h, set()).add(k)
        self.hot = {h for h in self.on if self.loads[h] > self.cap[h]}
        self.scale = float(np.mean(fleet.bps[free, 0])) or 1.0

    def delta(self, k: int, new: int) -> float:
        """What moving elephant k from its route to `new` changes of the
        cost (the squared overloads, inline: this runs tens of thousands
        of times a search)."""
        old, joined, d = self.hops[self.now[k]], self.hops[new], self.demand[self.free[k]]
        loads, cap, out = self.loads, self.cap, 0.0
        for h in old:
            if h not in joined:
                over = loads[h] - cap[h]
                out += max(over - d, 0.0) ** 2 - max(over, 0.0) ** 2
        for h in joined:
            if h not in old:
                over = loads[h] - cap[h]
                out += max(over + d, 0.0) ** 2 - max(over, 0.0) ** 2
        return out / self.scale

    def move(self, k: int, new: int) -> None:
        d = self.demand[self.free[k]]
        for h in self.hops[self.now[k]]:
            self.loads[h] -= d
            self.on[h].discard(k)
            if self.loads[h] <= self.cap[h]:
                self.hot.discard(h)
        for h in self.hops[new]:
            self.loads[h] += d
            self.on.setdefault(h, set()).add(k)
            if self.loads[h] > self.cap[h]:
                self.hot.add(h)
        self.now[k] = new


def anneal(planner: Planner, movable: np.ndarray, seed: int) -> tuple[tuple[int, int], ...]:
    """Moves (elephant, route as a row of its routes) from the routing now
    to the coolest state found; () if none is cooler. `movable`: per
    elephant, whether it may take part."""
    fleet = planner.fleet
    free = np.flatnonzero(movable & (fleet.rows >= 0) & (fleet.nroutes > 1))
    if not len(free):
        return ()
    state = _State(planner, free)
    if not state.hot:
        return ()
    rng = np.random.default_rng(seed)
    steps = min(MAX_STEPS, STEPS_PER_CHOICE * sum(len(r) for r in state.routes))
    draws = rng.random((steps, 4)).tolist()
    energy = best_energy = 0.0
    best = list(state.now)
    move_cost = MOVE_COST * state.scale
    for step, (hot_draw, pick_draw, route_draw, accept_draw) in enumerate(draws):
        k = _pick(state, hot_draw, pick_draw)
        options = state.routes[k]
        new = options[int(route_draw * len(options))]
        if new == state.now[k]:
            continue
        delta = state.delta(k, new) + move_cost * ((new != state.start[k]) - (state.now[k] != state.start[k]))
        temperature = state.scale * START_TEMPERATURE * END_TEMPERATURE ** (step / steps)
        if delta > 0 and accept_draw >= math.exp(-delta / temperature):
            continue
        state.move(k, new)
        energy += delta
        if energy < best_energy - 1e-9 * state.scale:
            best_energy, best = energy, list(state.now)
    for k, row in enumerate(best):
        if state.now[k] != row:
            state.move(k, row)
    _undo_needless(state)
    return tuple((i, row - int(fleet.base[i])) for i, row, was in zip(state.free, state.now, state.start) if row != was)


def _pick(state: _State, hot_draw: float, pick_draw: float) -> int:
    """An elephant to move: most often one on a link that is over."""
    if state.hot and hot_draw < HOT_PICKS:
        hot = sorted(state.hot)
        on = sorted(state.on[hot[int(pick_draw * len(hot))]])
        if on:
            return on[int((pick_draw * len(hot)) % 1 * len(on))]
    return int(pick_draw * len(state.free))


def _undo_needless(state: _State) -> None:
    """Sends back, one by one, each moved elephant whose return costs
    nothing: an annealer's walk makes moves the state it ends in does not
    need, and every one of them is a path change."""
    order = sorted(range(len(state.free)), key=lambda k: -state.demand[state.free[k]])
    for k in order:
        if state.now[k] != state.start[k] and state.delta(k, state.start[k]) <= 0:
            state.move(k, state.start[k])
