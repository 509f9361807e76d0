"""Reconciliation, the I/O half: one worker thread that owns every OpenFlow
request Railyard sends.

Triggers (switch connected, intent changed, periodic timer) are queued and
coalesced; a pass dumps the Railyard-cookie entries of the switches in
scope, diffs them against the desired overlay and commits the difference in
one bundle per switch: additions downstream-first, then deletions
ingress-first (make-before-break). No wipe on connect: a switch whose table
is already right receives nothing.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from controller.fabric import Endpoint, Fabric
from controller.intent.events import JobEvent, JobEventKind
from controller.intent.model import Intent
from controller.intent.service import IntentService
from controller.metrics import RESULTS, Metrics
from controller.southbound.commit import OverlayCommit, OverlayPlan
from controller.southbound.connections import SwitchConnections
from controller.southbound.overlay import (
    OverlayEntry,
    OverlayMemo,
    OverlayMeter,
    desired_meters,
    desired_overlay,
)
from controller.southbound.programmed import JobProgress, programmed_now
from controller.southbound.reconcile import (
    MeterDelta,
    SwitchDelta,
    changes,
    diff_meters,
    diff_table,
)
from controller.southbound.stats import ports_down
from controller.southbound.switches import SWITCH_ERROR_REASONS, CallTable, SwitchError, SwitchSession
from controller.southbound.tables import KnownTables
from controller.southbound.underlay import Ecmp
from controller.southbound.underlay_sync import UnderlaySync
from controller.te.engine import Meter, Move
from controller.te.headroom import by_switch, reserved_egresses

if TYPE_CHECKING:  # os-ken's controller module imports half of os-ken; annotations only
    from os_ken.controller.controller import Datapath

log = logging.getLogger(__name__)


class ReconcileTrigger(StrEnum):
    """Why a pass runs; in order of precedence when one pass serves several
    (see `_coalesce`). The value is the metric label."""

    ROLE = "role"  # this replica became the leader (HA): every table is read and adopted
    CONNECT = "connect"  # a switch (re)connected
    INTENT = "intent"  # intent changed (pins, jobs, drains)
    LINK = "link"  # a port went down or came back: the underlay's reserved ports follow (--underlay)
    TE = "te"  # adaptive TE moved elephants or meters
    PERIODIC = "periodic"  # the --reconcile-interval timer: repairs drift


@dataclass(frozen=True)
class Trigger:
    reason: ReconcileTrigger | None  # None: stop the worker
    switch: str | None = None  # None: every connected switch


_STOP = Trigger(None)


class TePlanner(Protocol):
    """What a pass needs of adaptive TE (the runtime's TeRunner provides it)."""

    def plan(self) -> tuple[int, list[Move], list[Meter]]: ...

    def adopt(self, entries: list[OverlayEntry], meters: Mapping[int, OverlayMeter]) -> None: ...

    def applied(self, generation: int) -> None: ...


class Reconciler:
    def __init__(
        self,
        fabric: Fabric,
        intent: IntentService,
        metrics: Metrics,
        interval_s: float = 10.0,
        reply_timeout_s: float = 5.0,
        audit_every: int = 6,
        max_in_flight: int = 64,
        underlay: Ecmp | None = None,
    ) -> None:
        self.fabric = fabric
        self.intent = intent
        self.metrics = metrics
        self.interval_s = interval_s
        self.reply_timeout_s = reply_timeout_s
        # Switches with an exchange unanswered at once: bounds what one pass
        # queues on the controller's connections and the switches' buffers.
        self.max_in_flight = max_in_flight
        self.tables = KnownTables(metrics, audit_every, max_in_flight)  # only the reconciler thread touches it
        # --underlay: the ECMP underlay is this controller's to install and keep (its own cookie owner).
        self.underlay = (
            None if underlay is None else UnderlaySync(fabric, metrics, audit_every, max_in_flight, underlay)
        )
        self.commit = OverlayCommit(fabric, metrics, max_in_flight)
        self.calls = CallTable()
        self.connections = SwitchConnections(
            fabric,
            metrics,
            self.calls,
            reply_timeout_s,
            connected=lambda name: self._triggers.put(Trigger(ReconcileTrigger.CONNECT, name)),
            failed=self._failed,
        )
        self._triggers: queue.Queue[Trigger] = queue.Queue()
        self._thread: threading.Thread | None = None
        # Set once every switch of the fabric has connected and been reconciled:
        # the API reports SERVING from then on.
        self.fabric_ready = threading.Event()
        self._jobs: dict[str, JobProgress] = {}  # only the reconciler thread touches it
        self._memo = OverlayMemo()  # only the reconciler thread touches it
        # Ports whose link is down: read once per connection, then port-status messages.
        self._down: frozenset[Endpoint] = frozenset()
        self._down_lock = threading.Lock()  # the app thread's messages, the worker thread's reads
        # (intent revision, ports down) -> the underlay's reserved ports, per switch
        self._reservation: tuple[tuple[int, frozenset[Endpoint]], Mapping[str, frozenset[int]]] = (
            (-1, frozenset()),
            {},
        )
        for phase in ("dump", "plan", "commit"):
            metrics.reconcile_phase.labels(phase)
        self.te: TePlanner | None = None  # the TE runner, when adaptive TE is on (set by the daemon)
        # (switch, port, link down?) from port-status messages: the statistics poller, when on.
        self.on_port_status: Callable[[str, int, bool], None] | None = None
        for name in fabric.switches:
            for kind in SWITCH_ERROR_REASONS:
                metrics.switch_errors.labels(name, kind)
            for found_by in ("count", "dump"):
                metrics.overlay_drift.labels(name, found_by)
        for trigger in ReconcileTrigger:
            metrics.reconcile_duration.labels(trigger)
            for result in RESULTS:
                metrics.reconcile_runs.labels(trigger, result)
        intent.subscribe(self._intent_changed)

    # --- called from the os-ken app thread -----------------------------------
    def switch_connected(self, datapath: Datapath) -> None:
        self.connections.switch_connected(datapath)

    def switch_disconnected(self, datapath: Datapath) -> None:
        self.connections.switch_disconnected(datapath)

    def connected(self) -> set[str]:
        return self.connections.names()

    def sessions(self) -> dict[str, SwitchSession]:
        """The live session of each connected switch (statistics polling shares them)."""
        return self.connections.sessions()

    def port_changed(self, datapath: Datapath, port: int, link_down: bool) -> None:
        """A switch's port-status message: handed to whoever watches link state."""
        name = self.connections.name_of(datapath.id)
        if name is None:
            return
        if self.underlay is not None:
            egress = Endpoint(name, port)
            with self._down_lock:
                down = self._down | {egress} if link_down else self._down - {egress}
                changed, self._down = down != self._down, down  # one reference swapped: read whole
            if changed:
                self._triggers.put(Trigger(ReconcileTrigger.LINK))
        if self.on_port_status is not None:
            self.on_port_status(name, port, link_down)

    # --- worker thread --------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="reconciler", daemon=True)
        self._thread.start()

    def request(self, reason: ReconcileTrigger) -> None:
        """Asks for a whole-fabric pass (e.g. TE moved elephants)."""
        self._triggers.put(Trigger(reason))

    def set_role(self, leading: bool, generation: int) -> None:
        """This replica leads (MASTER) or follows (SLAVE) under the election's
        generation. A new leader reads every table again (the old leader
        changed them) and adopts the TE moves on them: a takeover with
        nothing to change sends no flow-mod."""
        self.connections.set_role(leading, generation)
        self.request(ReconcileTrigger.ROLE)

    @property
    def leading(self) -> bool:
        return self.connections.leading

    def stop(self) -> None:
        self._triggers.put(_STOP)
        if self._thread:
            self._thread.join(timeout=self.reply_timeout_s + 1)

    def _run(self) -> None:
        next_periodic = time.monotonic() + self.interval_s
        while True:
            try:
                first = self._triggers.get(timeout=max(0.0, next_periodic - time.monotonic()))
            except queue.Empty:
                first = Trigger(ReconcileTrigger.PERIODIC)
            batch = [first, *self._drain()]
            if _STOP in batch:
                return
            if any(t.reason is ReconcileTrigger.PERIODIC for t in batch):
                next_periodic = time.monotonic() + self.interval_s
            reason, scope = self._coalesce(batch)
            try:
                self.reconcile(reason, scope)
            except Exception:  # never let one bad pass kill the loop
                log.exception("reconcile pass crashed")
                self.metrics.errors.labels("southbound", "reconcile_crash").inc()

    def _drain(self) -> list[Trigger]:
        items = []
        while True:
            try:
                items.append(self._triggers.get_nowait())
            except queue.Empty:
                return items

    @staticmethod
    def _coalesce(batch: list[Trigger]) -> tuple[ReconcileTrigger, set[str] | None]:
        """Many triggers, one pass: the whole fabric if any trigger wants it.
        The pass is reported under the most specific reason it served (a
        connect, then an intent change, then the timer), so a switch's
        connect reconcile is counted even when a periodic pass carried it."""
        reasons = {t.reason for t in batch}
        reason = next(r for r in ReconcileTrigger if r in reasons)
        if any(t.switch is None for t in batch):
            return reason, None
        return reason, {t.switch for t in batch if t.switch is not None}

    def reconcile(self, reason: ReconcileTrigger, scope: Collection[str] | None = None) -> bool:
        """One pass over `scope` (None = all connected switches). True if every
        switch in scope ended in sync."""
        started = time.perf_counter()
        sessions, role = self.connections.in_scope(scope)
        unclaimed = 0
        if role is not None:
            leading, generation = role
            if not leading:
                # A follower claims SLAVE once it knows the leader's generation
                # (a switch refuses an older one); the leader programs the switches.
                if generation:
                    self.connections.claim(sessions, role)
                return True
            claimed, reclaimed = self.connections.claim(sessions, role)
            for name in reclaimed:
                self.tables.forget(name)  # another replica led since this one read it
                if self.underlay is not None:
                    self.underlay.forget(name)
            unclaimed, sessions = len(sessions) - len(claimed), claimed
        # A switch that would not take this leader's claim was not reconciled: the pass is not a success.
        ok = self._read(reason, sessions) and not unclaimed
        # The underlay before the overlay: the overlay steers among next hops it must already have.
        underlay_failed = set()
        if self.underlay is not None:
            self.underlay.reserve(self._reserved(self.intent.snapshot()))
            underlay_failed = self.underlay.sync(sessions, reason is ReconcileTrigger.PERIODIC, self._failed)
        ok = ok and not underlay_failed
        dumped = time.perf_counter()
        plan = self._plan(sessions)
        planned = time.perf_counter()
        in_sync = self.commit.apply(sessions, plan, self.tables, self._failed)
        ok = ok and in_sync == set(plan.deltas)
        in_sync -= underlay_failed
        elapsed = self._record(reason, ok, started, dumped, planned)
        if ok and self.te is not None:
            self.te.applied(plan.te_generation)
        synced = self.connections.mark_synced(in_sync, plan.intent.revision)
        if synced.keys() >= set(self.fabric.switches):
            self.fabric_ready.set()
        self._report_programmed(plan.intent, synced)
        self._log_changes(reason, plan, elapsed)
        return ok

    def _reserved(self, intent: Intent) -> Mapping[str, frozenset[int]]:
        """The ports the underlay's hash keeps clear for placed jobs, derived
        once per intent revision and set of ports down."""
        key = (intent.revision, self._down)
        if self._reservation[0] != key:
            reserved = reserved_egresses(self.fabric, intent.jobs.values(), key[1])
            self._reservation = (key, by_switch(reserved))
        return self._reservation[1]

    def _read(self, reason: ReconcileTrigger, sessions: dict[str, SwitchSession]) -> bool:
        """Brings the known tables of `sessions` up to date (tables.py); False if a read failed."""
        fresh = self.connections.unsynced(sessions)
        ok = self.tables.read(reason is ReconcileTrigger.PERIODIC, sessions, self._failed)
        if self.underlay is not None and fresh:
            ok = self._read_ports_down({n: sessions[n] for n in fresh}) and ok
        for name in fresh & self.tables.keys():
            self.metrics.entries_installed.labels(name).set(len(self.tables[name].entries))
            if self.te is not None:
                # First look at this switch since it (or we) (re)started: keep the
                # elephant moves and meters it already carries instead of undoing them.
                self.te.adopt(list(self.tables[name].entries.values()), self.tables[name].meters)
        return ok

    def _read_ports_down(self, sessions: Mapping[str, SwitchSession]) -> bool:
        """Which ports of switches first seen since they (or this controller)
        started are down already. Port-status messages tell of changes only:
        an uplink that died while no controller ran would look alive to the
        reservations, which could then keep the hash on it alone. False if a
        switch did not say."""
        ok = True
        for name, ports in ports_down(sessions, self.max_in_flight).items():
            if isinstance(ports, SwitchError):
                ok = self._failed(name, ports, "dump_failed")
                continue
            known = self.fabric.ports(name)
            with self._down_lock:
                others = frozenset(e for e in self._down if e.node != name)
                self._down = others | {Endpoint(name, p) for p in ports if p in known}
        return ok

    def _plan(self, sessions: Mapping[str, SwitchSession]) -> OverlayPlan:
        """What each switch whose table is known should hold, and the difference."""
        te_generation, te_moves, te_meters = self.te.plan() if self.te is not None else (0, [], [])
        intent = self.intent.snapshot()
        desired = desired_overlay(self.fabric, intent, self._memo, te_moves, te_meters)
        meters = desired_meters(self.fabric, te_meters)
        deltas: dict[str, SwitchDelta] = {}
        meter_deltas: dict[str, MeterDelta] = {}
        for name in sessions:
            if name in self.tables:
                self.metrics.entries_desired.labels(name).set(len(desired[name]))
                deltas[name] = diff_table(name, desired[name], self.tables[name].entries)
                meter_deltas[name] = diff_meters(meters[name], self.tables[name].meters)
        return OverlayPlan(te_generation, intent, desired, meters, deltas, meter_deltas)

    def _record(self, reason: ReconcileTrigger, ok: bool, started: float, dumped: float, planned: float) -> float:
        """Counts and times the pass; its duration."""
        elapsed = time.perf_counter() - started
        self.metrics.reconcile_phase.labels("dump").observe(dumped - started)
        self.metrics.reconcile_phase.labels("plan").observe(planned - dumped)
        self.metrics.reconcile_phase.labels("commit").observe(started + elapsed - planned)
        self.metrics.reconcile_duration.labels(reason).observe(elapsed)
        self.metrics.reconcile_runs.labels(reason, "ok" if ok else "failed").inc()
        if ok:
            self.metrics.last_reconcile_success.set(time.time())
        return elapsed

    def _intent_changed(self, _intent: Intent, events: list[JobEvent]) -> None:
        if not events or any(e.kind is not JobEventKind.PROGRAMMED for e in events):
            self._triggers.put(Trigger(ReconcileTrigger.INTENT))

    def _report_programmed(self, intent: Intent, synced: Mapping[str, int]) -> None:
        done = programmed_now(self._jobs, intent, self._memo.jobs, synced)
        self.metrics.jobs_unprogrammed.set(sum(not p.programmed for p in self._jobs.values()))
        if done:
            self.intent.mark_programmed(done)

    def _failed(self, name: str, exc: SwitchError, error: str) -> bool:
        """Logs and counts a switch's failure (`error`: the railyard_errors
        reason); False, for `ok = self._failed(...)`."""
        log.warning("reconcile: %s", exc)
        self.metrics.switch_errors.labels(name, exc.reason).inc()
        self.metrics.errors.labels("southbound", error).inc()
        return False

    def _log_changes(self, reason: ReconcileTrigger, plan: OverlayPlan, elapsed: float) -> None:
        count, shown = changes(plan.deltas, plan.meter_deltas)
        if count:
            log.info("reconcile (%s): %d switches in %.1f ms: %s", reason, count, elapsed * 1e3, shown)
