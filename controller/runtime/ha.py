"""Replicas on etcd: which one leads, and what leading means.

The leader alone changes intent, reconciles the switches (as their OpenFlow
MASTER under the election's generation) and runs TE. Followers answer
reads and WatchJobs from an intent they keep current change by change (a
watch on the store, intent/etcd_watch.py), keep a connection to every
switch as SLAVE, and refuse mutations with FAILED_PRECONDITION naming the
leader (the Python client and CLI follow it). Telemetry agents send to
every replica, so a new leader's TE starts from live measurements.

No error ends the threads here. A replica that cannot read the intent (a
bad value in the store) keeps serving the intent it last read, says which
key is bad, does not stand for election, and resigns if it leads; it
recovers by itself once the value is repaired. A follower that is current
when elected leads at once, without reading the store again.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from controller.api.server import ApiServer
from controller.errors import NotLeader
from controller.intent.election import FOLLOW_POLL_S, LEASE_TTL_S, Election, Leadership
from controller.intent.etcd_store import EtcdIntentStore, EtcdKv
from controller.intent.etcd_watch import Compacted, StoredChange, watch
from controller.intent.service import IntentService
from controller.intent.store import BadStoredValue, StoreError
from controller.metrics import Metrics
from controller.runtime.te_runner import TeRunner
from controller.southbound.reconciler import Reconciler

log = logging.getLogger(__name__)

CATCH_UP_S = 1.0  # how long a new leader waits for its watch to reach the store before reading it all
RETRY_S = (0.1, 2.0)  # the follower's wait after a failure: doubling from the first to the second


class Replication:
    def __init__(
        self,
        store: EtcdIntentStore,
        address: str,
        intent: IntentService,
        reconciler: Reconciler,
        te: TeRunner,
        metrics: Metrics,
        api: ApiServer,
    ) -> None:
        self.store = store
        self.intent = intent
        self.reconciler = reconciler
        self.te = te
        self.metrics = metrics
        self.api = api
        # The election's own client, with a short timeout: a renewal that
        # hangs must not outlast the step-down deadline it guards.
        election_kv = EtcdKv(store.kv.url, store.kv.tls, timeout_s=LEASE_TTL_S / 4)
        self.election = Election(
            election_kv,
            address,
            self._changed,
            eligible=lambda: not self.unreadable,
            on_leaseless=lambda found: metrics.leader_key_leaseless.set(int(found)),
        )
        self.election.follow_poll_s = FOLLOW_POLL_S  # the follower's watch pokes it (_apply)
        self.leading = False
        self.unreadable = ""  # why the intent in the store cannot be read ("" while it can)
        store.require_fence = True  # a replica writes only under a leadership
        self._stop = threading.Event()
        # Leadership changes are applied on a thread of their own: taking over
        # may read the intent, which must not hold up the lease's renewals.
        self._changes: queue.Queue[Leadership] = queue.Queue()
        self._lock = threading.Lock()
        self._sync = threading.Lock()  # one of: a change applied, the intent reloaded
        intent.gate = self.gate
        te.lead(False)
        reconciler.set_role(False, 0)  # SLAVE until elected: nothing is written before
        metrics.leader.set(0)
        api.set_leader(False)

    def gate(self) -> None:
        """Raises NotLeader unless this replica leads, and its lease is fresh."""
        if not self.leading or not self.election.fresh():
            raise NotLeader(self.election.state.leader if not self.election.state.ours else "")

    def start(self) -> None:
        self.election.start()
        threading.Thread(target=self._apply_changes, name="leadership", daemon=True).start()
        threading.Thread(target=self._follow, name="follower-sync", daemon=True).start()

    def stop(self) -> None:
        """Steps down here first (mutations now get NotLeader, which clients
        follow), then resigns so another replica takes over at once."""
        self._stop.set()
        was_leading = self.leading
        self._step_down(Leadership("", 0, False))
        self.election.stop(resign=was_leading)

    # --- leadership -----------------------------------------------------------
    def _changed(self, state: Leadership) -> None:
        """From the election thread: a step-down takes effect at once; the rest queues."""
        if not state.ours:
            self._step_down(state)
        self._changes.put(state)

    def _apply_changes(self) -> None:
        while not self._stop.is_set():
            try:
                state = self._changes.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                if state != self.election.state:
                    continue  # superseded while it waited
                if state.ours:
                    self._lead(state)
                else:
                    self.reconciler.set_role(False, state.generation)
            except Exception as exc:  # the thread lives on; a leadership it cannot take up is given back
                self._failed("leadership", exc)
                if self.election.state.ours:
                    self.election.resign(f"taking up the leadership failed ({type(exc).__name__}: {exc})")

    def _step_down(self, state: Leadership) -> None:
        with self._lock:
            if not self.leading:
                return
            # The fence stays: a write already past the gate carries the old
            # generation, and etcd refuses it once another replica leads.
            self.leading = False
            self.te.lead(False)
            self.metrics.leader.set(0)
            self.metrics.leader_changes.inc()
            self.api.set_leader(False)
        log.warning("replica: no longer the leader (%s leads)", state.leader or "nobody")

    def _lead(self, state: Leadership) -> None:
        # The intent as the last leader left it, before anything is changed.
        try:
            reloaded = self._catch_up()
        except StoreError as exc:
            self.election.resign(f"elected, but cannot read the intent ({exc})")
            return
        with self._lock:
            if self.election.state != state:
                return  # lost it while catching up
            self.store.fence = state.generation
            self.leading = True
            self.te.lead(True)
            self.reconciler.set_role(True, state.generation)
            self.metrics.leader.set(1)
            self.metrics.leader_changes.inc()
            self.api.set_leader(True)
        log.info(
            "replica: leading (generation %d, intent revision %d, %s)",
            state.generation,
            self.intent.snapshot().revision,
            "read from the store" if reloaded else "current without reading the store",
        )

    def _catch_up(self) -> bool:
        """Until this replica holds the intent as stored: at once when its
        watch has applied the last change, else by reading it all. True if
        it read it all."""
        deadline = time.monotonic() + CATCH_UP_S
        while time.monotonic() < deadline and not self.unreadable:
            with self._sync:
                if not self.intent.stale and self.store.current(self.store.base):
                    return False
            time.sleep(0.02)
        if self.unreadable:
            raise StoreError(self.unreadable)
        self._reload()
        return True

    # --- following ------------------------------------------------------------
    def _follow(self) -> None:
        """Applies the store's changes as a watch delivers them; reads it
        all again only when it must (history compacted, a bad value)."""
        position, retry, must_reload = self.store.loaded_at + 1, RETRY_S[0], False
        while not self._stop.is_set():
            try:
                if must_reload or self.unreadable:
                    self._reload()
                    must_reload = False
                position = max(position, self.store.loaded_at + 1)
                for stored in watch(self.store, position):
                    self._apply(stored)
                    position = stored.at + 1
                    if self._stop.is_set():
                        return
                retry = RETRY_S[0]
                continue
            except Compacted as exc:
                log.warning("replica: %s; reading the intent again", exc)
                must_reload = True
                continue
            except BadStoredValue as exc:
                self._cannot_read(exc)
            except Exception as exc:  # etcd away, or anything else: the thread lives on
                self._failed("follower", exc)
            self._stop.wait(retry)
            retry = min(retry * 2, RETRY_S[1])

    def _apply(self, stored: StoredChange) -> None:
        if stored.leader:
            self.election.poke()
        with self._sync:
            if stored.empty or stored.at <= self.store.loaded_at or self.store.wrote(stored.at):
                return  # read already, or this replica's own write
            if self.leading:
                # Someone else wrote under the leader (an operator's repair,
                # or a bad value): it reads the intent again before going on.
                self._reload_locked()
                return
            current = self.intent.snapshot().revision
            self.intent.follow(stored.change, current if stored.revision is None else stored.revision)
            if stored.revision is not None:
                self.store.followed(stored.at)

    def _reload(self) -> None:
        with self._sync:
            self._reload_locked()

    def _reload_locked(self) -> None:
        try:
            self.intent.resync()
        except BadStoredValue as exc:
            self._cannot_read(exc)
            raise
        if self.unreadable:
            log.warning("replica: the intent reads again (revision %d)", self.intent.snapshot().revision)
            self.unreadable = ""
            self.metrics.intent_unreadable.set(0)

    def _cannot_read(self, exc: BadStoredValue) -> None:
        why = str(exc)
        if why != self.unreadable:
            log.error("replica: cannot read the intent, serving revision %d until it is repaired: %s",
                      self.intent.snapshot().revision, why)  # fmt: skip
        self.unreadable = why
        self.metrics.intent_unreadable.set(1)
        if self.leading or self.election.state.ours:
            self.election.resign(f"it cannot read the intent ({why})")

    def _failed(self, thread: str, exc: Exception) -> None:
        log.warning("replica: %s: %s: %s", thread, type(exc).__name__, exc)
        self.metrics.errors.labels("replica", f"{thread}_failed").inc()
