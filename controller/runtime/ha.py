"""Replicas on etcd: which one leads, and what leading means.

The leader alone changes intent, reconciles the switches (as their OpenFlow
MASTER under the election's generation) and runs TE. Followers answer
reads and WatchJobs from an intent kept current by polling the store, keep
a connection to every switch as SLAVE, and refuse mutations with
FAILED_PRECONDITION naming the leader (the Python client and CLI follow
it). Telemetry agents send to every replica, so a new leader's TE starts
from live measurements.
"""

from __future__ import annotations

import logging
import queue
import threading

from controller.api.server import ApiServer
from controller.errors import NotLeader
from controller.intent.election import LEASE_TTL_S, Election, Leadership
from controller.intent.etcd_store import EtcdIntentStore, EtcdKv
from controller.intent.service import IntentService
from controller.intent.store import StoreError
from controller.metrics import Metrics
from controller.runtime.te_runner import TeRunner
from controller.southbound.reconciler import Reconciler

log = logging.getLogger(__name__)

SYNC_POLL_S = 0.1  # how often a follower asks whether the intent moved


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
        self.election = Election(election_kv, address, self._changed)
        self.leading = False
        store.require_fence = True  # a replica writes only under a leadership
        self._stop = threading.Event()
        # Leadership changes are applied on a thread of their own: taking over
        # reloads the intent, which must not hold up the lease's renewals.
        self._changes: queue.Queue[Leadership] = queue.Queue()
        self._lock = threading.Lock()
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
            if state != self.election.state:
                continue  # superseded while it waited
            if state.ours:
                self._lead(state)
            else:
                self.reconciler.set_role(False, state.generation)

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
            self.intent.resync()
        except StoreError as exc:
            self.election.resign(f"elected, but cannot read the intent ({exc})")
            return
        with self._lock:
            if self.election.state != state:
                return  # lost it while reloading
            self.store.fence = state.generation
            self.leading = True
            self.te.lead(True)
            self.reconciler.set_role(True, state.generation)
            self.metrics.leader.set(1)
            self.metrics.leader_changes.inc()
            self.api.set_leader(True)
        log.info("replica: leading (generation %d)", state.generation)

    def _follow(self) -> None:
        """A follower reloads when the intent moved; a leader, when one of its
        writes has an unknown outcome (it may be in the store)."""
        while not self._stop.wait(SYNC_POLL_S):
            try:
                if (self.leading and self.intent.stale) or (not self.leading and self.store.changed()):
                    self.intent.resync()
            except StoreError as exc:
                log.warning("replica: cannot follow the intent: %s", exc)
