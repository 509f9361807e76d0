"""The adaptive TE engine: telemetry in, elephant moves and decisions out. Pure.

Whoever runs TE owns an `Engine` (the TE runner, each arm of the
simulator): its caches (the route index, the flow catalog) are derived from
the fabric and the flow keys it has seen, and are never shared. One
`Engine.step` per cycle (the TE runner calls it as each telemetry batch
lands, 50-200 ms apart) takes the state and a `Snapshot` (telemetry, the
operator's drains and pins, the placed jobs' flows, the time) and runs the
stages of `_Cycle`:

1. `links_down`: a link telemetry reports down is drained for the cycle.
2. `elephants`: fresh flow records (younger than `max_age_s`; stale data is
   never acted on) at >= `elephant_fraction` of the NIC rate, crossing
   spines, with Hedera's demand estimate (senders share their NIC,
   receivers cap what they take: a collided TCP flow measures half its
   demand, and moving on measurements alone would under-correct); a placed
   job's flow that goes quiet between iterations is kept, and its return
   is not a new collision.
3. `expire`: moves whose flow went quiet (a job's, once the job is gone)
   give their entries back; a pin by intent outranks a move.
4. `background`: load beyond the elephants' records, smoothed.
5. `settle`: a move checked once, after `hysteresis_s`, against the rate
   the flow had before: one that measures worse goes back and is held.
6. `incast`: many senders converging on one NIC beyond its capacity, each
   metered at its ingress leaf to `incast_headroom` of its fair share.
7. `rebalance`: single moves, then joint plans (rebalance.py).
8. `report`: collisions and unfixable links, once per onset.

Moves are soft state, not intent: they are rebuilt from the switches'
tables (their cookie says "te") after a restart, and expire when the flow
goes quiet.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace

import numpy as np

from controller.fabric import Endpoint, Fabric, NicId
from controller.fabric import addressing as ad
from controller.te.engine import lately
from controller.te.engine.catalog import FlowCatalog
from controller.te.engine.elephants import find_elephants, where_moved
from controller.te.engine.frames import FlowFrame, PortFrame, frames
from controller.te.engine.incast import find_incasts, meter_incasts, pin_metered
from controller.te.engine.links import LinkIndex
from controller.te.engine.outcome import Outcome
from controller.te.engine.rebalance import Inputs, rebalance
from controller.te.engine.state import (
    Decision,
    DecisionKind,
    EngineConfig,
    Move,
    PathChanges,
    TeState,
    describe_flow,
)
from controller.te.jobs import Drains
from controller.te.load import link_name
from controller.te.view import FlowKey, FlowSample, PortSample

# The caches start over when they hold this many times what the live view
# needs (and at least MIN_CACHE entries): bounded by the live view, not by history.
CACHE_SLACK = 2
MIN_CACHE = 1 << 16


@dataclass(frozen=True)
class Snapshot:
    """What one cycle sees. `flows`, `ports`: telemetry as frames, or as
    the LinkView keeps it. `steered`: NIC pairs an operator pins; their
    flows count as load but are never moved (that intent outranks adaptive
    TE: a move made before the pin is given back). `jobs`: NIC pairs of
    placed jobs' flows; TE may rebalance them among their spines, but never
    meters them as incast senders (a job's all-to-all converges on every
    NIC by design), and their fresh records share their NICs in the demand
    estimate at any rate."""

    flows: FlowFrame | Mapping[FlowKey, FlowSample]
    ports: PortFrame | Mapping[Endpoint, PortSample]
    now: float
    drains: Drains = Drains()
    steered: Collection[tuple[NicId, NicId]] = frozenset()
    jobs: Collection[tuple[NicId, NicId]] = frozenset()


@dataclass
class EngineCaches:
    """Sizes of an engine's caches, for their gauges."""

    routes: int = 0  # route-table rows (every leaf pair's routes asked for)
    flow_keys: int = 0  # flow keys in the catalog
    restarts: int = 0  # times the caches started over


class Engine:
    """One TE engine for one fabric: its configuration and its caches."""

    def __init__(self, fabric: Fabric, cfg: EngineConfig = EngineConfig()) -> None:
        self.fabric = fabric
        self.cfg = cfg
        self.caches = EngineCaches()
        # Called between a step's stages (tens of milliseconds each at 16K
        # GPUs): the daemon waits there while API calls run
        # (telemetry.priority). It sees nothing of the step.
        self.pause: Callable[[], None] = _go_on
        self._fresh()

    def _fresh(self) -> None:
        self.index = LinkIndex(self.fabric)
        self.catalog = FlowCatalog(self.index)

    def step(self, state: TeState, snapshot: Snapshot) -> tuple[TeState, list[Decision]]:
        cycle = _Cycle(self, state, snapshot)
        self.pause()
        result = cycle.run()
        self.caches.routes, self.caches.flow_keys = len(self.index), len(self.catalog)
        # What the live view needs, in each cache's own unit: flow keys, and
        # the route-table rows of the leaf pairs its flows join. A restart
        # costs the next cycle one lookup per live key and leaf pair.
        keys = len(cycle.flows) + len(state.recent)
        known = cycle.cat[cycle.cat >= 0]
        joined = known[self.catalog.nroutes[known] > 0]
        live, first = np.unique(self.catalog.base[joined], return_index=True)
        rows = int(self.catalog.nroutes[joined[first]].sum())
        over = len(self.catalog) > max(CACHE_SLACK * keys, MIN_CACHE)
        if over or len(self.index) > max(CACHE_SLACK * rows, MIN_CACHE):
            # The state's rows are found again by key (TeState.recent); the
            # live view's leaf pairs keep their routes, copied.
            retired = self.index
            self.index = retired.carrying(live.tolist())
            self.catalog = FlowCatalog(self.index, self.catalog.nic_tables)
            self.caches.restarts += 1
            del cycle  # with it the old catalog, whose index is `retired`
            retired.release(self.pause)
        return result


def _go_on() -> None:
    pass


class _Cycle:
    """One step's working data, stage by stage (see the module docstring)."""

    def __init__(self, engine: Engine, state: TeState, snapshot: Snapshot) -> None:
        self.engine, self.state, self.snap, self.cfg = engine, state, snapshot, engine.cfg
        self.index, self.catalog = engine.index, engine.catalog
        self.now = snapshot.now
        flows, self.ports = frames(self.index, snapshot.flows, snapshot.ports)
        # Only fresh records are acted on (elephants, incast). The live view
        # keeps a minute of them: the rest would only cost catalog rows.
        self.flows = flows.since(self.now - self.cfg.max_age_s)
        self.cat = self.catalog.rows(self.flows.keys, engine.pause)
        self.decisions: list[Decision] = []
        self.moves: dict[FlowKey, Move] = dict(state.moves)

    def run(self) -> tuple[TeState, list[Decision]]:
        pause = self.engine.pause
        self.links_down()
        self.elephants()
        pause()
        self.expire()
        self.background()
        self.settle()
        self.incast()
        pause()
        outcome = self.rebalance()
        unfixable, collisions = self.report(outcome)
        pin_metered(self.catalog, self.meters, self.moves, self.flows, self.now)
        return TeState(
            moves=self.moves,
            incasts=frozenset(ad.nic_ip(d) for d in self.incasts),
            collisions=frozenset(collisions),
            down=self.down,
            recent=self.recent,
            meters=self.meters,
            unfixable=frozenset(unfixable),
            residual=self.residual,
            explained=self.explained,
            port_at=self.folded_at,
            traffic=self.traffic,
            changes=self.changes(),
            fruitless=outcome.fruitless,
        ), self.decisions

    def links_down(self) -> None:
        fabric, ports, index = self.engine.fabric, self.ports, self.index
        self.fresh = self.now - ports.observed_at <= self.cfg.max_age_s
        self.down = frozenset(
            link_name(fabric, fabric.link_at(index.egresses[i]))
            for i in np.flatnonzero(self.fresh & ~ports.up).tolist()
        )
        self.decisions += [
            Decision(DecisionKind.LINK_DOWN, name, "telemetry reports no carrier", self.now, link=name)
            for name in sorted(self.down - self.state.down)
        ]
        drains = self.snap.drains
        self.dead = index.dead(Drains(drains.switches, drains.links | self.down))

    def elephants(self) -> None:
        catalog, cfg = self.catalog, self.cfg
        before = self.state.recent
        if before.owner != catalog.owner:  # another catalog's rows, or this one started over
            # Its flows are found again by key; where they were, in a route
            # table that is gone, is unknown until they are seen again.
            unknown = np.full(len(before.row), -1, dtype=np.int64)
            before = replace(before, cat=catalog.rows(before.keys), row=unknown, owner=catalog.owner)
        self.found, last = find_elephants(
            catalog, self.flows, self.cat, self.moves, before, self.now, cfg, self.snap.jobs
        )
        self.recent, self.kept = lately.recent(before, self.found, last, self.now, cfg, catalog, self.snap.jobs)
        self.traffic = hash((frozenset(self.recent.keys), self.down))

    def expire(self) -> None:
        seen = self.recent.find(self.catalog.rows(list(self.moves)))
        for (key, move), r in zip(list(self.moves.items()), seen.tolist()):
            if (move.src, move.dst) in self.snap.steered:
                del self.moves[key]
                self._decide(DecisionKind.EXPIRE, key, "pinned by intent; TE lets go")
                continue
            last_seen = move.last_seen if r < 0 else max(move.last_seen, float(self.recent.at[r]))
            placed_job = (move.src, move.dst) in self.snap.jobs  # between iterations, not gone
            if self.now - last_seen > self.cfg.expire_after_s and not placed_job:
                del self.moves[key]
                self._decide(DecisionKind.EXPIRE, key, "flow quiet; back to ECMP")
        self.let_go_of_rescued()

    def let_go_of_rescued(self) -> None:
        """A flow moved off a dead path goes back to where the hash (or its job's placement) puts it
        once that path is back: held where it was sent in a hurry, it would crowd the survivors'
        links for good, and the flows that stayed would never spread back over the repaired one.
        A flow pinned for its ACKs' sake goes back once nothing is dead."""
        rescued = [key for key, move in self.moves.items() if move.rescued]
        if not rescued:
            return
        index, catalog, whole = self.index, self.catalog, not self.dead.any()
        for key, c in zip(rescued, catalog.rows(rescued).tolist()):
            move = self.moves[key]
            if move.via == move.from_via:  # pinned for its ACKs, whose way back crossed something dead
                if whole:
                    del self.moves[key]
                    self._decide(DecisionKind.EXPIRE, key, "nothing is down any more; back to ECMP")
                continue
            row = index.row_of(int(catalog.base[c]), move.from_via) if c >= 0 and move.from_via else -1
            if row >= 0 and not self.dead[index.hops(row)].any():
                del self.moves[key]
                self._decide(DecisionKind.EXPIRE, key, f"its path across {move.from_via} is back; back to ECMP")

    def _decide(self, kind: DecisionKind, key: FlowKey, why: str, **fields: str) -> None:
        self.decisions.append(Decision(kind, describe_flow(key), why, self.now, flow=key, **fields))

    def background(self) -> None:
        cfg, index = self.cfg, self.index
        self.tx = np.where(self.fresh, self.ports.tx_bps, 0.0)
        self.port_at = np.where(self.fresh, self.ports.observed_at, -np.inf)
        self.explained, self.folded_at = lately.explained(self.catalog, self.found, self.port_at, self.state, cfg)
        # Background is believed only once smoothed: the residual's EWMA starts
        # from nothing, not from its first sample, which is two independent
        # noisy readings' difference (up to 60% of a full link under ±30% noise).
        residual = self.state.residual
        before = residual if residual is not None and len(residual) == len(self.tx) else 0.0
        # Unclamped: noise averages out under the EWMA only if its sign is kept.
        # No port sample: no evidence of background.
        raw = np.where(np.isfinite(self.port_at), self.tx - self.explained, 0.0)
        self.residual = (1 - cfg.background_smoothing) * before + cfg.background_smoothing * raw
        self.loads = np.where(self.residual > cfg.background_floor * index.capacity, self.residual, 0.0)

    def settle(self) -> None:
        if self.state.traffic != self.traffic:  # judged under other traffic: free to move again
            self.moves.update({k: replace(m, held=False) for k, m in self.moves.items() if m.held})
        measured, changes = (self.tx, self.fresh), self.changes_so_far()
        reverted = lately.settle(
            self.index, self.catalog, self.dead, measured, self.found, self.moves, self.now, self.cfg, changes
        )
        self.decisions += reverted
        # The measured load (`explained`) was theirs where they were; what is
        # planned now must see them where they go back to (hotspot seed 1: a
        # plan moved a flow onto the route a flow reverted to in that cycle).
        back = {d.flow: self.moves[d.flow] for d in reverted if d.flow is not None}
        self.found = where_moved(self.found, self.catalog, back)
        self.starved, self.dormant = lately.absent(
            self.index, self.catalog, self.dead, self.recent, self.kept, self.moves
        )

    def incast(self) -> None:
        catalog, cfg, now = self.catalog, self.cfg, self.now
        self.incasts = find_incasts(catalog, self.flows, self.cat, now, cfg, self.snap.jobs)
        self.meters = meter_incasts(self.engine.fabric, self.state.meters, self.incasts, now, cfg)
        for dst, senders in sorted(self.incasts.items()):
            if ad.nic_ip(dst) not in self.state.incasts:
                share = self.meters[senders[0][0]].rate_bps
                why = f"{len(senders)} senders into one NIC; each metered at its leaf to {share / 1e9:.1f} Gb/s"
                self.decisions.append(Decision(DecisionKind.INCAST, ad.nic_ip(dst), why, now))
        self.decisions += [
            Decision(DecisionKind.EXPIRE, ad.nic_ip(dst), "incast over; meters removed", now)
            for dst in sorted({m.dst for m in self.state.meters.values()} - {m.dst for m in self.meters.values()})
        ]

    def rebalance(self) -> Outcome:
        placed = self.found + self.starved + self.dormant
        dormant = np.arange(len(placed)) >= len(placed) - len(self.dormant)
        # A metered flow carries what its meter lets through, whatever its record
        # (counted before the meter) says; TE may move it to relieve others.
        if self.meters:
            rate = placed.rate_bps.copy()
            found = placed.find(self.catalog.rows(list(self.meters)))
            for i, meter in zip(found.tolist(), self.meters.values()):
                if i >= 0:
                    rate[i] = min(rate[i], meter.rate_bps)
            placed = replace(placed, rate_bps=rate)
        outcome = rebalance(
            Inputs(
                self.index,
                self.catalog,
                self.dead,
                placed,
                self.loads,
                self.tx,
                self.moves,
                self.now,
                self.cfg,
                self.snap.steered,
                self.meters.keys(),
                {key: changes.count for key, changes in self.changes_so_far().items()},
                dormant,
                self.state.fruitless,
                self.engine.pause,
            )
        )
        self.moves = outcome.moves
        return outcome

    def report(self, outcome: Outcome) -> tuple[set[str], set[str]]:
        """(unfixable, collided) links. An unfixable link stays unfixable
        while it stays over, until a move actually relieves it: one decision
        per onset, not one each time a noisy verdict wavers."""
        state, now = self.state, self.now
        unfixable = outcome.unfixable.keys() | {
            n for n in state.unfixable & outcome.collisions.keys() if n not in outcome.relieved
        }
        collisions = outcome.collisions.keys() - unfixable
        why = {**outcome.collisions, **outcome.unfixable}
        self.decisions += [
            Decision(DecisionKind.COLLISION, name, why[name], now, link=name)
            for name in sorted(collisions - state.collisions)
        ]
        self.decisions += [
            Decision(DecisionKind.UNFIXABLE, name, why[name], now, link=name)
            for name in sorted(unfixable - state.unfixable)
        ]
        self.decisions += outcome.decisions  # what was seen, then what was done about it
        return set(unfixable), set(collisions)

    def changes_so_far(self) -> Mapping[FlowKey, PathChanges]:
        """Per flow TE moved, the path changes TE made to it since a link
        went down or came back, kept for `forget_changes_after_s` after the
        flow was last seen as an elephant. Not since the set of elephants
        last changed, nor only while the flow is one lately: under TCP,
        flows cross the elephant threshold and fall back all through a run,
        and each time a count that started over let a flow move again
        (randx5, then randx4 at 10 Mb/s: 3 path changes a flow). A drain
        does not start it over (a plan, not a failure); a new leader does."""
        return self.state.changes if self.state.down == self.down else {}

    def changes(self) -> dict[FlowKey, PathChanges]:
        """`changes_so_far` after this cycle's decisions, less the flows not seen for `forget_changes_after_s`."""
        so_far = self.changes_so_far()
        keys = list(so_far)
        found = self.recent.find(self.catalog.rows(keys))
        # Per flow, when `recent` last saw it (-inf: not there), in one pass,
        # and a new record only where that changed: ft2-16k keeps ~6,000.
        seen = np.full(len(keys), -np.inf)
        seen[found >= 0] = self.recent.at[found[found >= 0]]
        horizon = self.now - self.cfg.forget_changes_after_s
        counts: dict[FlowKey, PathChanges] = {}
        for key, entry, at in zip(keys, so_far.values(), seen.tolist()):
            if at > entry.seen_at:
                entry = PathChanges(entry.count, at)
            if entry.seen_at >= horizon:
                counts[key] = entry
        for d in self.decisions:
            if d.flow is not None and d.kind in (DecisionKind.REROUTE, DecisionKind.REVERT) and d.from_via != d.to_via:
                before = counts.get(d.flow)
                counts[d.flow] = PathChanges((before.count if before else 0) + 1, self.now)
        return counts


def path_changed(before: TeState, after: TeState) -> bool:
    """What a step changed that the switches must be told: a move made,
    changed or given back, or a meter's rate. One test for the TE runner
    and the simulator."""
    return (
        before.moves.keys() != after.moves.keys()
        or any(after.moves[k].via != before.moves[k].via for k in after.moves)
        or {k: m.rate_bps for k, m in before.meters.items()} != {k: m.rate_bps for k, m in after.meters.items()}
    )
