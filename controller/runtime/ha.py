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
import threading

from controller.api.server import ApiServer
from controller.errors import NotLeader
from controller.intent.election import Election, Leadership
from controller.intent.etcd_store import EtcdIntentStore
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
        self.election = Election(store.kv, address, self._changed)
        self.leading = False
        self._stop = threading.Event()
        self._lock = threading.RLock()  # one leadership change at a time (a resignation re-enters)
        intent.gate = self.gate
        te.lead(False)
        reconciler.set_role(False, 0)  # SLAVE until elected: nothing is written before
        metrics.leader.set(0)
        api.set_leader(False)

    def gate(self) -> None:
        if not self.leading:
            raise NotLeader(self.election.state.leader)

    def start(self) -> None:
        self.election.start()
        threading.Thread(target=self._follow, name="follower-sync", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self.election.stop(resign=self.leading)

    def _changed(self, state: Leadership) -> None:
        with self._lock:
            if state.ours and not self.leading:
                self._lead(state)
            elif not state.ours:
                if self.leading:
                    self.leading = False
                    self.store.fence = 0
                    self.te.lead(False)
                    self.metrics.leader.set(0)
                    self.metrics.leader_changes.inc()
                    self.api.set_leader(False)
                    log.warning("replica: no longer the leader (%s leads)", state.leader or "nobody")
                self.reconciler.set_role(False, state.generation)

    def _lead(self, state: Leadership) -> None:
        # The intent as the last leader left it, before anything is changed.
        try:
            self.intent.resync()
        except StoreError as exc:
            self.election.resign(f"elected, but cannot read the intent ({exc})")
            return
        self.store.fence = state.generation
        self.leading = True
        self.te.lead(True)
        self.reconciler.set_role(True, state.generation)
        self.metrics.leader.set(1)
        self.metrics.leader_changes.inc()
        self.api.set_leader(True)
        log.info("replica: leading (generation %d)", state.generation)

    def _follow(self) -> None:
        while not self._stop.wait(SYNC_POLL_S):
            if self.leading:
                continue
            try:
                if self.store.changed():
                    self.intent.resync()
            except StoreError as exc:
                log.warning("replica: cannot follow the intent: %s", exc)
