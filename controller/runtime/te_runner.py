"""Runs the TE engine against the live link view and hands its moves to the
reconciler. The engine is pure; this is the loop, the clock, the lock, the
metrics and the log around it, and where its decisions go: counted, logged,
written as JSON lines (`--te-decisions FILE`, what the emulation's reports
read) and handed to whoever listens (`on_decisions`).

Moves and meters are soft state. After a restart they are adopted from the
switches' own tables (entries with a "te" cookie, and the Railyard meters
they apply) on the first dump, so a restarted controller neither forgets
where it put elephants or which incast senders it polices, nor sends
flow-mods or meter-mods to put them back.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO

from controller.fabric import Fabric
from controller.intent.service import IntentService
from controller.metrics import Metrics
from controller.southbound.overlay import OverlayEntry, OverlayMeter, meter_from_entry, move_from_entry
from controller.te.engine import (
    Decision,
    DecisionKind,
    Engine,
    EngineConfig,
    Meter,
    Move,
    Snapshot,
    TeState,
    path_changed,
)
from controller.telemetry.ingest import TelemetryIngest

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.2  # the longest TE waits without new telemetry
MIN_GAP_S = 0.05  # the shortest between two cycles, however fast telemetry comes
# After a cycle, TE waits at least this many times the CPU time it took: at
# most a third of the interpreter in TE, the rest for the API (a 16k-GPU
# fixing cycle takes over a second of CPU, and telemetry arrives every few
# ms). CPU time, not wall: a cycle slowed by others' work (the API, or the
# emulation's switches on the same cores) took no more of the interpreter.
# Paced by wall time, an emulated randx5 cycle of 3 s held TE back 6 s, and
# TE ran five cycles in a 20 s run.
PACE = 2.0
SUMMARY_S = 60.0  # decisions are summed up at INFO once in this long at most


class TeRunner:
    def __init__(
        self,
        fabric: Fabric,
        ingest: TelemetryIngest,
        intent: IntentService,
        metrics: Metrics,
        interval_s: float = DEFAULT_INTERVAL_S,
        config: EngineConfig = EngineConfig(),
        enabled: bool = True,
        clock: Callable[[], float] = time.time,
        decisions_file: Path | None = None,
        programs: bool = True,
    ) -> None:
        """`programs` False: advisory (--southbound none), nothing applies
        the moves, so no reaction time is waited for."""
        self.fabric = fabric
        self.engine = Engine(fabric, config)  # this runner's: its caches are nobody else's
        self.engine.pause = ingest.priority.pace  # a cycle steps aside for API calls, and rests, between stages
        if enabled:
            ingest.keep_columns(self.engine.index.ids)  # the view as this engine's frames, kept as it arrives
        self.ingest = ingest
        self.intent = intent
        self.metrics = metrics
        self.interval_s = interval_s
        self.config = config
        self.enabled = enabled
        self.clock = clock
        self.programs = programs
        self._state = TeState()
        self._generation = 0  # bumps whenever the set of moves changes
        self._pending: list[tuple[int, float]] = []  # (generation, when its reroute was decided)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._on_change: Callable[[], None] = lambda: None
        self._listeners: list[Callable[[Sequence[Decision]], None]] = []
        # Line-buffered, appended: a reader follows it as it grows, and a restart adds to it.
        self._decisions: IO[str] | None = decisions_file.open("a", buffering=1) if decisions_file else None
        self._leading = True  # a lone controller leads; with replicas, ha.py says
        self._decided: Counter[str] = Counter()  # decisions since the last INFO summary
        self._summarised_at = 0.0
        self._cache_restarts = 0  # the engine's count already in the counter

    def on_change(self, callback: Callable[[], None]) -> None:
        self._on_change = callback

    def on_decisions(self, callback: Callable[[Sequence[Decision]], None]) -> None:
        """`callback(decisions)` after every cycle that decided something, on the TE thread."""
        self._listeners.append(callback)

    def plan(self) -> tuple[int, list[Move], list[Meter]]:
        """(generation, elephant moves, incast meters) for the reconciler."""
        with self._lock:
            return self._generation, list(self._state.moves.values()), list(self._state.meters.values())

    def adopt(self, entries: list[OverlayEntry], meters: Mapping[int, OverlayMeter]) -> None:
        """Takes over TE entries and meters found on a switch (after a restart).
        An adopted meter is an incast seen now: it holds for `expire_after_s`
        and stays while telemetry still shows the incast, so a restart during
        an incast leaves its senders metered."""
        now = self.clock()
        found = [m for m in (move_from_entry(self.fabric, e, now) for e in entries) if m is not None]
        metered = [m for m in (meter_from_entry(self.fabric, e, meters, now) for e in entries) if m is not None]
        with self._lock:
            moves, kept = dict(self._state.moves), dict(self._state.meters)
            new = {m.key: m for m in found if m.key not in moves}
            new_meters = {m.key: m for m in metered if m.key not in kept}
            if not new and not new_meters:
                return
            moves.update(new)
            kept.update(new_meters)
            self._state = replace(self._state, moves=moves, meters=kept)
            self._generation += 1
        log.info("te: adopted %d move(s) and %d meter(s) found on the switches", len(new), len(new_meters))

    def applied(self, generation: int) -> None:
        """The reconciler committed the overlay for `generation`: reroutes decided
        up to it are now in the switches. That interval is the reaction time."""
        now = self.clock()
        with self._lock:
            done = [(g, t) for g, t in self._pending if g <= generation]
            self._pending = [(g, t) for g, t in self._pending if g > generation]
        for _, decided in done:
            self.metrics.te_reaction.observe(max(now - decided, 0.0))

    def lead(self, leading: bool) -> None:
        """With replicas: only the leader runs TE. A new leader starts from no
        moves and adopts what the switches hold (the old leader's moves), so a
        takeover changes no path by itself."""
        with self._lock:
            self._leading = leading
            if leading:
                self._state = TeState()
                self._pending = []
                self._generation += 1

    def start(self) -> None:
        if self.enabled:
            threading.Thread(target=self._run, name="te", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self.ingest.arrived.set()

    def _publish(self, decisions: Sequence[Decision]) -> None:
        for decision in decisions:
            self.metrics.te_decisions.labels(decision.kind).inc()
            log.debug("te %s %s at %.3f: %s", decision.kind, decision.subject, decision.at, decision.reason)
        if not decisions:
            return
        if self._decisions is not None:
            self._decisions.write("".join(json.dumps(d.as_record()) + "\n" for d in decisions))
        for listener in self._listeners:
            listener(decisions)

    def _run(self) -> None:
        # A cycle runs as soon as a telemetry batch lands (reaction time is
        # the point), or every interval_s without one (moves still expire).
        took = 0.0
        while True:
            self.ingest.arrived.wait(self.interval_s)
            self.ingest.arrived.clear()
            if self._stop.wait(max(MIN_GAP_S, PACE * took)):
                return
            self.ingest.priority.yield_to_api()
            started = time.thread_time()
            try:
                self.cycle()
            except Exception:
                log.exception("te cycle failed")
                self.metrics.errors.labels("te", "cycle_failed").inc()
            took = time.thread_time() - started

    def cycle(self) -> None:
        if not self._leading:
            return  # a follower: the leader moves the elephants
        started = time.perf_counter()
        now = self.clock()
        view_flows, view_ports = self.ingest.frames() or self.ingest.snapshot()
        with self._lock:
            before = self._state
        intent = self.intent.snapshot()
        state, decisions = self.engine.step(
            before, Snapshot(view_flows, view_ports, now, intent.drains, intent.pinned_pairs, intent.job_pairs)
        )
        changed = path_changed(before, state)
        with self._lock:
            if self._state is not before:
                return  # reset meanwhile (a new leadership): this cycle's view is gone
            self._state = state
            if changed:
                self._generation += 1
                if self.programs and any(d.kind in (DecisionKind.REROUTE, DecisionKind.REVERT) for d in decisions):
                    self._pending.append((self._generation, now))
        self._publish(decisions)
        self._summarise(decisions, state)
        self.metrics.te_cycle.observe(time.perf_counter() - started)
        self.metrics.te_moves_active.set(len(state.moves))
        self.metrics.te_meters_active.set(len(state.meters))
        caches = self.engine.caches
        self.metrics.te_cache_entries.labels("routes").set(caches.routes)
        self.metrics.te_cache_entries.labels("flow_keys").set(caches.flow_keys)
        self.metrics.te_cache_restarts.inc(caches.restarts - self._cache_restarts)
        self._cache_restarts = caches.restarts
        if changed:
            self._on_change()

    def _summarise(self, decisions: Sequence[Decision], state: TeState) -> None:
        """Each decision is logged at DEBUG; at INFO, one line a minute at
        most says how many of each kind there were."""
        self._decided.update(str(decision.kind) for decision in decisions)
        now = time.monotonic()
        if self._decided and now - self._summarised_at >= SUMMARY_S:
            log.info(
                "te: %s in the last %.0f s; %d moves, %d meters active",
                ", ".join(f"{count} {kind}" for kind, count in sorted(self._decided.items())),
                now - self._summarised_at if self._summarised_at else SUMMARY_S,
                len(state.moves),
                len(state.meters),
            )
            self._decided.clear()
            self._summarised_at = now
