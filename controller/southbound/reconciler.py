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

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from controller.fabric import Fabric
from controller.intent.model import Intent
from controller.intent.service import IntentService, JobEvent, JobEventKind
from controller.metrics import RESULTS, Metrics
from controller.southbound import ofcodec, wire
from controller.southbound.fanout import fan_out
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
    diff_meters,
    diff_table,
    order_for_adds,
    order_for_deletes,
    tiers,
)
from controller.southbound.switches import (
    SWITCH_ERROR_REASONS,
    CallTable,
    SwitchError,
    SwitchSession,
)
from controller.southbound.tables import KnownTables
from controller.southbound.underlay_sync import UnderlaySync
from controller.te.engine import Meter, Move

log = logging.getLogger(__name__)


class ReconcileTrigger(StrEnum):
    """Why a pass runs; in order of precedence when one pass serves several
    (see `_coalesce`). The value is the metric label."""

    ROLE = "role"  # this replica became the leader (HA): every table is read and adopted
    CONNECT = "connect"  # a switch (re)connected
    INTENT = "intent"  # intent changed (pins, jobs, drains)
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
        underlay: bool = False,
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
        self.underlay = UnderlaySync(fabric, metrics, audit_every, max_in_flight) if underlay else None
        self.calls = CallTable()
        self._sessions: dict[str, SwitchSession] = {}
        self._lock = threading.Lock()
        self._triggers: queue.Queue[Trigger] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._by_dpid = {sw.dpid: sw.name for sw in fabric.switches.values()}
        # Set once every switch of the fabric has connected and been reconciled:
        # the API reports SERVING from then on.
        self.fabric_ready = threading.Event()
        # Switches reconciled since they (re)connected -> the intent revision
        # they were last found or made in sync with.
        self._synced: dict[str, int] = {}
        self._jobs: dict[str, JobProgress] = {}  # only the reconciler thread touches it
        self._memo = OverlayMemo()  # only the reconciler thread touches it
        for phase in ("dump", "plan", "commit"):
            metrics.reconcile_phase.labels(phase)
        self.te: TePlanner | None = None  # the TE runner, when adaptive TE is on (set by the daemon)
        # (switch, port, link down?) from port-status messages: the statistics poller, when on.
        self.on_port_status: Callable[[str, int, bool], None] | None = None
        # With replicas (ha.py): (leading, generation). A leader claims every
        # switch as MASTER with the election's generation before it reads or
        # writes; a follower is SLAVE and sends nothing else. None: the only
        # controller, which needs no role (EQUAL).
        self._role: tuple[bool, int] | None = None
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
    def switch_connected(self, datapath) -> None:
        name = self._by_dpid.get(datapath.id)
        if name is None:
            log.warning("ignoring switch dpid %016x: not in fabric %s", datapath.id, self.fabric.spec.name)
            self.metrics.errors.labels("southbound", "unknown_dpid").inc()
            return
        with self._lock:
            current = self._sessions.get(name)
        if current is not None and current.datapath is not datapath:
            # A second connection claims a connected switch's dpid: a switch that
            # reconnected before its old connection was seen to die, or another
            # box with the same dpid. The old one is asked (off the app thread,
            # which must not block): if it answers, the newcomer is refused.
            threading.Thread(target=self._arbitrate, args=(name, current, datapath), daemon=True).start()
            return
        self._adopt(name, datapath)

    def _arbitrate(self, name: str, current: SwitchSession, datapath) -> None:
        try:
            current.echo()
        except SwitchError:
            self._adopt(name, datapath)  # the old connection is gone: the new one is the switch now
            return
        log.warning(
            "switch %s: a second connection (from %s) claims its dpid %016x while the first answers; refused",
            name,
            datapath.address,
            datapath.id,
        )
        self.metrics.errors.labels("southbound", "duplicate_dpid").inc()
        datapath.close()

    def _adopt(self, name: str, datapath) -> None:
        with self._lock:
            stale = self._sessions.get(name)
            self._sessions[name] = SwitchSession(name, datapath, self.calls, self.reply_timeout_s)
            self._synced.pop(name, None)
            self._publish_connections()
        if stale is not None:
            # The switch reconnected before os-ken noticed the old connection
            # die; whoever waits on the old one would wait for nothing.
            self.calls.fail_switch(datapath.id)
        log.info("switch %s connected (dpid %016x)", name, datapath.id)
        self._triggers.put(Trigger(ReconcileTrigger.CONNECT, name))

    def switch_disconnected(self, datapath) -> None:
        name = self._by_dpid.get(datapath.id)
        if name is None:
            return  # not a switch of this fabric: switch_connected never gave it a session
        with self._lock:
            session = self._sessions.get(name)
            if session is None or session.datapath is not datapath:
                return  # a newer connection of the same switch already replaced it
            del self._sessions[name]
            self._synced.pop(name, None)
            self._publish_connections()
        self.calls.fail_switch(datapath.id)
        log.info("switch %s disconnected", name)

    def connected(self) -> set[str]:
        with self._lock:
            return set(self._sessions)

    def sessions(self) -> dict[str, SwitchSession]:
        """The live session of each connected switch (statistics polling shares them)."""
        with self._lock:
            return dict(self._sessions)

    def port_changed(self, datapath, port: int, link_down: bool) -> None:
        """A switch's port-status message: handed to whoever watches link state."""
        name = self._by_dpid.get(datapath.id)
        if name is not None and self.on_port_status is not None:
            self.on_port_status(name, port, link_down)

    def _publish_connections(self) -> None:
        self.metrics.switches_connected.set(len(self._sessions))
        for name in self.fabric.switches:
            self.metrics.switch_up.labels(name).set(1 if name in self._sessions else 0)

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
        with self._lock:
            was_leading = self._role is not None and self._role[0]
            self._role = (leading, generation)
        if leading and not was_leading:
            self._triggers.put(Trigger(ReconcileTrigger.ROLE))
        else:
            self.request(ReconcileTrigger.ROLE)

    @property
    def leading(self) -> bool:
        return self._role is None or self._role[0]

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

    def reconcile(self, reason: ReconcileTrigger, scope: set[str] | None = None) -> bool:
        """One pass over `scope` (None = all connected switches). True if every
        switch in scope ended in sync."""
        started = time.perf_counter()
        with self._lock:
            sessions = {n: s for n, s in self._sessions.items() if scope is None or n in scope}
            role = self._role
        if role is not None:
            leading, generation = role
            if not leading:
                # A follower claims SLAVE once it knows the leader's generation
                # (a switch refuses an older one); the leader programs the switches.
                if generation:
                    self._claim(sessions, role)
                return True
            claimed = self._claim(sessions, role)
            unclaimed, sessions = len(sessions) - len(claimed), claimed
        else:
            unclaimed = 0
        with self._lock:
            fresh = set(sessions) - self._synced.keys()
        # A switch that would not take this leader's claim was not reconciled: the pass is not a success.
        ok = self.tables.read(reason is ReconcileTrigger.PERIODIC, sessions, self._failed) and not unclaimed
        # The underlay first: the overlay steers among next hops it must already have.
        underlay_failed = (
            self.underlay.sync(sessions, reason is ReconcileTrigger.PERIODIC, self._failed)
            if self.underlay is not None
            else set()
        )
        ok = ok and not underlay_failed
        for name in fresh & self.tables.keys():
            self.metrics.entries_installed.labels(name).set(len(self.tables[name].entries))
            if self.te is not None:
                # First look at this switch since it (or we) (re)started: keep the
                # elephant moves and meters it already carries instead of undoing them.
                self.te.adopt(list(self.tables[name].entries.values()), self.tables[name].meters)
        dumped = time.perf_counter()

        te_generation, te_moves, te_meters = self.te.plan() if self.te is not None else (0, [], [])
        intent = self.intent.snapshot()
        desired = desired_overlay(self.fabric, intent, self._memo, te_moves, te_meters)
        desired_meter_sets = desired_meters(self.fabric, te_meters)
        known = {n: self.tables[n] for n in sessions if n in self.tables}
        deltas: dict[str, SwitchDelta] = {}
        meter_deltas: dict[str, MeterDelta] = {}
        for name, table in known.items():
            self.metrics.entries_desired.labels(name).set(len(desired[name]))
            deltas[name] = diff_table(name, desired[name], table.entries)
            meter_deltas[name] = diff_meters(desired_meter_sets[name], table.meters)
        planned = time.perf_counter()

        # Meters exist before the entries that use them and go after them (a
        # switch refuses an entry naming a missing meter, and deleting a meter
        # deletes every entry that uses it). Each step is in flight on every
        # switch at once; across switches only the tiers' order matters.
        in_sync = set(deltas)
        upserts = {
            n: [("add", m) for m in d.adds] + [("modify", m) for m in d.changes] for n, d in meter_deltas.items()
        }
        in_sync -= self._send_meters(sessions, upserts)
        for tier_group in tiers(self.fabric, order_for_adds(self.fabric, in_sync)):
            in_sync -= self._commit(sessions, {n: deltas[n].adds for n in tier_group}, "add")
        for tier_group in tiers(self.fabric, order_for_deletes(self.fabric, in_sync)):
            in_sync -= self._commit(sessions, {n: deltas[n].deletes for n in tier_group}, "delete")
        in_sync -= self._send_meters(sessions, {n: [("delete", m) for m in meter_deltas[n].deletes] for n in in_sync})
        for name in deltas:
            if name in in_sync:
                known[name].apply(deltas[name], desired_meter_sets[name])
                self.metrics.entries_installed.labels(name).set(len(desired[name]))
            else:
                self.tables.forget(name)  # unknown now: read it again next pass
        ok = ok and in_sync == set(deltas)
        in_sync -= underlay_failed

        elapsed = time.perf_counter() - started
        self.metrics.reconcile_phase.labels("dump").observe(dumped - started)
        self.metrics.reconcile_phase.labels("plan").observe(planned - dumped)
        self.metrics.reconcile_phase.labels("commit").observe(started + elapsed - planned)
        self.metrics.reconcile_duration.labels(reason).observe(elapsed)
        self.metrics.reconcile_runs.labels(reason, "ok" if ok else "failed").inc()
        if ok:
            self.metrics.last_reconcile_success.set(time.time())
            if self.te is not None:
                self.te.applied(te_generation)
        with self._lock:
            for name in in_sync & set(self._sessions):
                self._synced[name] = intent.revision
            synced = dict(self._synced)
            if synced.keys() >= set(self.fabric.switches):
                self.fabric_ready.set()
        self._report_programmed(intent, synced)
        self._log_changes(reason, deltas, meter_deltas, elapsed)
        return ok

    def _claim(self, sessions: dict[str, SwitchSession], role: tuple[bool, int]) -> dict[str, SwitchSession]:
        """Asks each switch not yet in `role` for it; the sessions that hold it.
        A switch that refuses (a newer generation claimed it: this replica is
        deposed and has not heard yet) is left alone."""
        leading, generation = role
        exchanges = {}
        for name, session in sessions.items():
            if session.role != role:
                try:
                    exchanges[name] = session.start_role(leading, generation)
                except SwitchError as exc:
                    self._failed(name, exc, "role")
        held = {n: s for n, s in sessions.items() if s.role == role}
        for name, exchange in exchanges.items():
            try:
                exchange.result()
            except SwitchError as exc:
                self._failed(name, exc, "role")
                continue
            sessions[name].role = role
            held[name] = sessions[name]
            if leading:
                # Another replica led since this one last read the table: read it again.
                self.tables.forget(name)
                if self.underlay is not None:
                    self.underlay.forget(name)
                with self._lock:
                    self._synced.pop(name, None)
        return held

    def _intent_changed(self, _intent: Intent, events: list[JobEvent]) -> None:
        if not events or any(e.kind is not JobEventKind.PROGRAMMED for e in events):
            self._triggers.put(Trigger(ReconcileTrigger.INTENT))

    def _report_programmed(self, intent: Intent, synced: Mapping[str, int]) -> None:
        done = programmed_now(self._jobs, intent, self._memo.jobs, synced)
        self.metrics.jobs_unprogrammed.set(sum(not p.programmed for p in self._jobs.values()))
        if done:
            self.intent.mark_programmed(done)

    def _failed(self, name: str, exc: SwitchError, error: str) -> bool:
        """Logs and counts a switch's failure; False, for `ok = self._failed(...)`."""
        log.warning("reconcile: %s", exc)
        self.metrics.switch_errors.labels(name, exc.reason).inc()
        self.metrics.errors.labels("southbound", error).inc()
        return False

    def _log_changes(self, reason, deltas, meter_deltas, elapsed: float) -> None:
        changed = sorted(n for n in deltas if not deltas[n].empty or not meter_deltas[n].empty)
        if not changed:
            return
        shown = changed[:8]  # a TE cycle may touch hundreds of leaves: the log line stays one line
        log.info(
            "reconcile (%s): %d switches in %.1f ms: %s%s",
            reason,
            len(changed),
            elapsed * 1e3,
            ", ".join(
                f"{n} +{len(deltas[n].adds)} -{len(deltas[n].deletes)}"
                + (
                    f" meters +{len(meter_deltas[n].adds)} ~{len(meter_deltas[n].changes)} "
                    f"-{len(meter_deltas[n].deletes)}"
                    if not meter_deltas[n].empty
                    else ""
                )
                for n in shown
            ),
            f" and {len(changed) - len(shown)} more" if len(changed) > len(shown) else "",
        )

    def _send_meters(self, sessions, mods: dict[str, list[tuple[str, OverlayMeter]]]) -> set[str]:
        """Meter mods on every switch at once; the switches that failed."""
        starts = {
            n: functools.partial(
                sessions[n].start_confirmed,
                [ofcodec.meter_mod(sessions[n].datapath, m, k) for k, m in ms],
                "meter mods",
            )
            for n, ms in mods.items()
            if ms
        }
        failed = set()
        for name, result in fan_out(starts, self.max_in_flight).items():
            if isinstance(result, SwitchError):
                self._failed(name, result, "meter_mod_failed")
                failed.add(name)
                continue
            for kind, _ in mods[name]:
                self.metrics.meter_mods.labels(name, kind).inc()
        return failed

    def _commit(self, sessions, entries: dict[str, tuple[OverlayEntry, ...]], kind: str) -> set[str]:
        """One bundle per switch, all in flight at once; the switches that failed."""
        encode = wire.add_flow if kind == "add" else wire.delete_flow
        starts = {
            n: functools.partial(sessions[n].start_bundle, [encode(e) for e in es]) for n, es in entries.items() if es
        }
        failed = set()
        for name, result in fan_out(starts, self.max_in_flight).items():
            if isinstance(result, SwitchError):
                log.warning("reconcile: %s", result)
                self.metrics.switch_errors.labels(name, result.reason).inc()
                self.metrics.bundles.labels(name, "failed").inc()
                failed.add(name)
                continue
            self.metrics.bundles.labels(name, "ok").inc()
            self.metrics.flow_mods.labels(name, kind).inc(len(entries[name]))
        return failed
