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
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from controller.fabric import Fabric
from controller.intent.service import IntentService
from controller.metrics import RESULTS, Metrics
from controller.southbound import ofcodec
from controller.southbound.overlay import JobEntryMemo, OverlayEntry, OverlayMeter, desired_meters, desired_overlay
from controller.southbound.reconcile import (
    MeterDelta,
    SwitchDelta,
    diff_meters,
    diff_table,
    order_for_adds,
    order_for_deletes,
)
from controller.southbound.switches import SWITCH_ERROR_REASONS, CallTable, SwitchError, SwitchSession
from controller.te.engine import Meter, Move

log = logging.getLogger(__name__)


class ReconcileTrigger(StrEnum):
    """Why a pass runs; in order of precedence when one pass serves several
    (see `_coalesce`). The value is the metric label."""

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
    ) -> None:
        self.fabric = fabric
        self.intent = intent
        self.metrics = metrics
        self.interval_s = interval_s
        self.reply_timeout_s = reply_timeout_s
        self.calls = CallTable()
        self._sessions: dict[str, SwitchSession] = {}
        self._lock = threading.Lock()
        self._triggers: queue.Queue[Trigger] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._by_dpid = {sw.dpid: sw.name for sw in fabric.switches.values()}
        # Set once every switch of the fabric has connected and been reconciled:
        # the API reports SERVING from then on.
        self.fabric_ready = threading.Event()
        self._synced: set[str] = set()  # switches reconciled since they (re)connected
        self._job_entries: JobEntryMemo = {}  # only the reconciler thread touches it
        self.te: TePlanner | None = None  # the TE runner, when adaptive TE is on (set by the daemon)
        for name in fabric.switches:
            for kind in SWITCH_ERROR_REASONS:
                metrics.switch_errors.labels(name, kind)
        for trigger in ReconcileTrigger:
            metrics.reconcile_duration.labels(trigger)
            for result in RESULTS:
                metrics.reconcile_runs.labels(trigger, result)
        intent.subscribe(lambda _intent, _events: self._triggers.put(Trigger(ReconcileTrigger.INTENT)))

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
            self._synced.discard(name)
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
            self._synced.discard(name)
            self._publish_connections()
        self.calls.fail_switch(datapath.id)
        log.info("switch %s disconnected", name)

    def connected(self) -> set[str]:
        with self._lock:
            return set(self._sessions)

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
            fresh = set(sessions) - self._synced
        ok = True
        installed: dict[str, dict] = {}
        meters_installed: dict[str, dict] = {}
        for name, session in sessions.items():
            try:
                installed[name] = session.dump_overlay()
                meters_installed[name] = session.dump_meters()
            except SwitchError as exc:
                installed.pop(name, None)
                ok = False
                log.warning("reconcile: %s", exc)
                self.metrics.switch_errors.labels(name, exc.reason).inc()
                self.metrics.errors.labels("southbound", "dump_failed").inc()
                continue
            self.metrics.entries_installed.labels(name).set(len(installed[name]))
            if name in fresh and self.te is not None:
                # First look at this switch since it (or we) (re)started: keep the
                # elephant moves it already carries instead of undoing them.
                self.te.adopt(list(installed[name].values()), meters_installed[name])
        te_generation, te_moves, te_meters = self.te.plan() if self.te is not None else (0, [], [])
        desired = desired_overlay(self.fabric, self.intent.snapshot(), self._job_entries, te_moves, te_meters)
        desired_meter_sets = desired_meters(self.fabric, te_meters)
        deltas: dict[str, SwitchDelta] = {}
        meter_deltas: dict[str, MeterDelta] = {}
        for name, table in installed.items():
            self.metrics.entries_desired.labels(name).set(len(desired[name]))
            deltas[name] = diff_table(name, desired[name], table)
            meter_deltas[name] = diff_meters(desired_meter_sets[name], meters_installed[name])

        # Meters exist before the entries that use them and go after them (a
        # switch refuses an entry naming a missing meter, and deleting a meter
        # deletes every entry that uses it).
        in_sync = set(deltas)
        for name, delta in meter_deltas.items():
            upserts = [("add", m) for m in delta.adds] + [("modify", m) for m in delta.changes]
            if not self._meters(sessions[name], upserts):
                in_sync.discard(name)
        for name in order_for_adds(self.fabric, deltas):
            if name in in_sync and not self._commit(sessions[name], deltas[name].adds, "add"):
                in_sync.discard(name)
        for name in order_for_deletes(self.fabric, deltas):
            if name in in_sync and not self._commit(sessions[name], deltas[name].deletes, "delete"):
                in_sync.discard(name)
        for name in in_sync & set(meter_deltas):
            if not self._meters(sessions[name], [("delete", m) for m in meter_deltas[name].deletes]):
                in_sync.discard(name)
        for name in in_sync:
            self.metrics.entries_installed.labels(name).set(len(desired[name]))
        ok = ok and in_sync == set(deltas)

        elapsed = time.perf_counter() - started
        self.metrics.reconcile_duration.labels(reason).observe(elapsed)
        self.metrics.reconcile_runs.labels(reason, "ok" if ok else "failed").inc()
        if ok:
            self.metrics.last_reconcile_success.set(time.time())
            if self.te is not None:
                self.te.applied(te_generation)
        with self._lock:
            self._synced |= in_sync & set(self._sessions)
            if self._synced >= set(self.fabric.switches):
                self.fabric_ready.set()
        changed = sorted(n for n in deltas if not deltas[n].empty or not meter_deltas[n].empty)
        if changed:
            log.info(
                "reconcile (%s): %s in %.1f ms",
                reason,
                ", ".join(
                    f"{n} +{len(deltas[n].adds)} -{len(deltas[n].deletes)}"
                    + (
                        f" meters +{len(meter_deltas[n].adds)} ~{len(meter_deltas[n].changes)} "
                        f"-{len(meter_deltas[n].deletes)}"
                        if not meter_deltas[n].empty
                        else ""
                    )
                    for n in changed
                ),
                elapsed * 1e3,
            )
        return ok

    def _meters(self, session: SwitchSession, mods: list[tuple[str, OverlayMeter]]) -> bool:
        if not mods:
            return True
        try:
            session.send_confirmed([ofcodec.meter_mod(session.datapath, m, kind) for kind, m in mods], "meter mods")
        except SwitchError as exc:
            log.warning("reconcile: %s", exc)
            self.metrics.switch_errors.labels(session.name, exc.reason).inc()
            self.metrics.errors.labels("southbound", "meter_mod_failed").inc()
            return False
        for kind, _ in mods:
            self.metrics.meter_mods.labels(session.name, kind).inc()
        return True

    def _commit(self, session: SwitchSession, entries, kind: str) -> bool:
        if not entries:
            return True
        build = ofcodec.add_flow if kind == "add" else ofcodec.delete_flow
        try:
            session.commit_bundle([build(session.datapath, e) for e in entries])
        except SwitchError as exc:
            log.warning("reconcile: %s", exc)
            self.metrics.switch_errors.labels(session.name, exc.reason).inc()
            self.metrics.bundles.labels(session.name, "failed").inc()
            return False
        self.metrics.bundles.labels(session.name, "ok").inc()
        self.metrics.flow_mods.labels(session.name, kind).inc(len(entries))
        return True
