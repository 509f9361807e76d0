"""The one code path that changes intent: validate, persist, publish.

The gRPC API and tests call this; nothing else mutates intent. A change is
validated against the fabric first and persisted before the in-memory
snapshot moves, so a rejected or failed request leaves both untouched. After
each change, listeners (the reconciler) are told; they read the snapshot.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from controller.errors import AlreadyExists, Conflict, NotFound, iso_time, shown
from controller.fabric import Endpoint, Fabric
from controller.fabric import addressing as ad
from controller.intent.drains import DrainTarget, rerouted_jobs
from controller.intent.events import WATCH_HISTORY, JobEvent, JobEventKind, JobEvents, Listener
from controller.intent.loading import follow, intent_from_store
from controller.intent.model import FlowPin, Intent, RecordKind, pin_to_doc, validate_pin
from controller.intent.retries import (
    MAX_RETIRED,
    Retired,
    check_same_request,
    retired_to_doc,
)
from controller.intent.store import Change, IntentStore, StoreError
from controller.metrics import Metrics
from controller.schedulers.extender import FabricView
from controller.te.capacity import FreeCapacity, Usage, free_capacity, free_masks, server_table
from controller.te.jobs import Job, JobError, JobRequest, job_to_doc, validate_request
from controller.te.load import LoadLedger
from controller.te.placement import FabricState, place
from controller.te.scoring import MAX_CANDIDATES, CandidateScore, score_candidates

log = logging.getLogger(__name__)


class IntentService:
    def __init__(
        self,
        fabric: Fabric,
        store: IntentStore,
        metrics: Metrics,
        live_load: Callable[[], Mapping[Endpoint, float]] = dict,
        clock: Callable[[], float] = time.time,
        watch_history: int = WATCH_HISTORY,
        gate: Callable[[], None] = lambda: None,
    ) -> None:
        self.fabric = fabric
        # Raises NotLeader where this replica may not change intent (ha.py);
        # a lone controller always may.
        self.gate = gate
        # The store may hold a change this replica has not loaded (a write
        # whose outcome is unknown, another writer): reload before the next.
        self._stale = False
        self._store = store
        self._metrics = metrics
        self._live_load = live_load
        self._clock = clock
        self._lock = threading.Lock()
        self._intent: Intent
        self._retired: dict[str, Retired]
        self._ledger: LoadLedger
        self._usage: Usage
        self._reload()
        self.events = JobEvents(lambda: self._intent, watch_history)
        self._publish_counts()

    def free_capacity(self, all_servers: bool = False) -> tuple[FreeCapacity, int]:
        """(free GPUs per pod and per server, the intent revision they are of):
        taken under the lock, so a concurrent placement is either all in or out."""
        with self._lock:
            return free_capacity(self.fabric, self._usage, all_servers), self._intent.revision

    def close(self) -> None:
        """Lets go of the store (and its one-writer lock)."""
        self._store.close()

    def snapshot(self) -> Intent:
        return self._intent

    def subscribe(self, listener: Listener) -> None:
        self.events.subscribe(listener)

    def unsubscribe(self, listener: Listener) -> None:
        self.events.unsubscribe(listener)

    def watch_from(self, since: int, listener: Listener) -> list[JobEvent]:
        """Subscribes `listener` and returns the job events after revision `since` (events.py)."""
        return self.events.watch_from(since, listener)

    def programmed_revision(self, job: Job) -> int:
        return self.events.programmed_revision(job)

    def mark_programmed(self, jobs: Iterable[tuple[Job, int]]) -> None:
        self.events.mark_programmed(jobs)

    # --- pins ---------------------------------------------------------------
    def pin_flow(self, pin: FlowPin) -> FlowPin:
        """Creates or moves a pin. Re-sending an identical pin changes nothing."""
        with self._lock:
            current = self._writable()
            validate_pin(self.fabric, current, pin)
            if current.pins.get(pin.name) == pin:
                return pin
            new = current.with_pin(pin)
            self._commit(new, Change(puts={(RecordKind.PIN, pin.name): pin_to_doc(pin)}))
        log.info("pin %s: %s via %s (revision %d)", pin.name, pin.match.describe(), pin.spine, new.revision)
        self._changed(new, [])
        return pin

    def unpin(self, name: str) -> FlowPin:
        with self._lock:
            current = self._writable()
            new = current.without_pin(name)  # raises NotFound
            self._commit(new, Change(puts={}, deletes=frozenset({(RecordKind.PIN, name)})))
        log.info("unpin %s (revision %d)", name, new.revision)
        self._changed(new, [])
        return current.pins[name]

    # --- jobs ---------------------------------------------------------------
    def index_load(self, measured: Mapping[Endpoint, float]) -> None:
        """A new copy of the measured load (on the telemetry thread): the
        ledger indexes it now, so the next placement finds it ready."""
        self._ledger.index_measured(measured)

    def place_job(
        self, request: JobRequest, admit: Callable[[Job], None] | None = None, validate_only: bool = False
    ) -> tuple[Job, bool]:
        """(job, created). Validation comes first: an invalid request is refused
        whatever its key. A retry (same job id and request_id, same parameters)
        returns the original placement, also for RETRY_WINDOW_S after its
        release (retries.py); the same key with other parameters is refused,
        and so is any other request for an existing job id. `admit` sees the
        new job before it is committed, and may refuse it by raising (the API:
        a reply that would not fit the message limit). With `validate_only`
        the job is what it would be, and nothing is committed."""
        validate_request(self.fabric, request)
        with self._lock:
            current = self._writable()
            existing = current.jobs.get(request.job_id)
            if existing is not None:
                if request.request_id and existing.request.request_id == request.request_id:
                    check_same_request(existing.request, request)
                    return existing, False
                raise AlreadyExists(
                    f"job {request.job_id!r} already exists (placed at {iso_time(existing.placed_at)}); "
                    "release it first, or retry with its original request_id"
                )
            now = self._clock()
            retired = self._retired.get(request.job_id)
            if retired is not None and request.request_id == retired.request_id and retired.live(now):
                check_same_request(retired.job.request, request)
                return retired.job, False
            state = FabricState(
                current.jobs, current.drains, self._live_load(), self._ledger.bps, self._usage, self._ledger
            )
            job = place(self.fabric, state, request, now)
            limit = request.max_predicted_utilization
            if limit and job.predicted_max_utilization > limit:
                raise Conflict(
                    f"job {request.job_id!r}: its best placement predicts {job.predicted_max_utilization:.3f} of a "
                    f"link, over its max_predicted_utilization {limit:g}; nothing was placed"
                )
            if admit is not None:
                admit(job)
            if validate_only:
                return job, False
            new = current.with_jobs({job.job_id: job})
            # A new placement under this id ends the old key's replay.
            forgotten = {(RecordKind.RETIRED, job.job_id)} if retired is not None else set()
            self._commit(
                new, Change(puts={(RecordKind.JOB, job.job_id): job_to_doc(job)}, deletes=frozenset(forgotten))
            )
            self._retired.pop(job.job_id, None)
            self._ledger.add(job)
            self._usage.add(job)
        log.info(
            "job %s placed: %d GPUs in pods %s, %d cross-leaf flows, predicted max utilization %.3f",
            job.job_id,
            len(job.gpus),
            list(job.pods),
            sum(1 for f in job.flows if f.via),
            job.predicted_max_utilization,
        )
        self._changed(new, [JobEvent(JobEventKind.PLACED, job, new.revision)])
        return job, True

    def score_placements(
        self, request: JobRequest, candidates: Sequence[tuple[str, ...]]
    ) -> tuple[list[CandidateScore], int]:
        """Each candidate server set scored for `request`, as PlaceJob would
        place it there, against the intent at one revision; nothing placed."""
        if not 1 <= len(candidates) <= MAX_CANDIDATES:
            raise JobError("candidates", f"{len(candidates)} candidates", f"1 to {MAX_CANDIDATES}")
        validate_request(self.fabric, replace(request, servers=()))
        with self._lock:
            current = self._intent
            state = FabricState(
                current.jobs, current.drains, self._live_load(), self._ledger.bps, self._usage, self._ledger
            )
            scores = score_candidates(self.fabric, state, request, candidates, self._clock())
            return scores, current.revision

    def fabric_view(self, job_id: str) -> FabricView:
        """What a scheduler extender reads (schedulers/extender.py), taken
        under the lock: free and reachable rails per server, each pod's
        uplink load, and the job's servers if it is placed."""
        with self._lock:
            current = self._intent
            masks = free_masks(self.fabric, self._usage, current.drains)
            utilization = self._ledger.pod_uplink_utilization()
            job = current.jobs.get(job_id)
        table = server_table(self.fabric)
        return FabricView(
            free_rails=dict(zip(table.names, masks.tolist(), strict=True)),
            pod_of={name: key[0] for name, key in zip(table.names, table.keys, strict=True)},
            uplink_utilization=utilization,
            job_servers=None if job is None else frozenset(ad.server_name(g.nic.pod, g.nic.server) for g in job.gpus),
        )

    def get_job(self, job_id: str) -> Job:
        job = self._intent.jobs.get(job_id)
        if job is None:
            raise NotFound(f"no job {shown(job_id)}")
        return job

    def release_job(self, job_id: str, admit: Callable[[Job], None] | None = None) -> Job:
        """Releases the job; its retry key, if it had one, is kept (retries.py).
        `admit` sees the job before the release is committed, and may refuse it."""
        with self._lock:
            current = self._writable()
            new = current.without_job(job_id)  # raises NotFound
            job = current.jobs[job_id]
            if admit is not None:
                admit(job)
            now = self._clock()
            retired = {j: r for j, r in self._retired.items() if r.live(now)}
            if job.request.request_id:
                retired[job_id] = Retired(job, now)
            # Keys past their window, and the oldest beyond MAX_RETIRED, are forgotten here.
            retired = dict(sorted(retired.items(), key=lambda kv: kv[1].released_at)[-MAX_RETIRED:])
            puts: dict[tuple[str, str], dict] = (
                {(RecordKind.RETIRED, job_id): retired_to_doc(retired[job_id])} if job_id in retired else {}
            )
            deletes = {(RecordKind.JOB, job_id)} | {
                (RecordKind.RETIRED, j) for j in self._retired.keys() - retired.keys()
            }
            self._commit(new, Change(puts=puts, deletes=frozenset(deletes)))
            self._retired = retired
            self._ledger.add(job, sign=-1.0)
            self._usage.remove(job)
        log.info("job %s released (revision %d)", job_id, new.revision)
        self._changed(new, [JobEvent(JobEventKind.RELEASED, job, new.revision)])
        return job

    # --- drains -------------------------------------------------------------
    def set_drain(self, target: DrainTarget, name: str, drained: bool) -> tuple[str, list[Job]]:
        """Drains or undrains a switch or link; returns its canonical name and
        the jobs whose flows moved off it."""
        with self._lock:
            current = self._writable()
            canonical = target.resolve(self.fabric, name)
            members = target.drained(current.drains)
            if (canonical in members) == drained:
                return canonical, []
            members = members | {canonical} if drained else members - {canonical}
            drains = target.with_drained(current.drains, members)
            moved = rerouted_jobs(self.fabric, current, drains) if drained else {}
            new = current.with_jobs(moved, drains)
            record = (target.record, canonical)
            jobs: dict[tuple[str, str], dict] = {(RecordKind.JOB, jid): job_to_doc(job) for jid, job in moved.items()}
            change = Change(
                puts={**jobs, record: {}} if drained else jobs, deletes=frozenset() if drained else frozenset({record})
            )
            self._commit(new, change)
            self._ledger.reset(new.jobs.values())
        log.info(
            "%s %s %s; %d job(s) rerouted (revision %d)",
            "drained" if drained else "undrained",
            target,
            canonical,
            len(moved),
            new.revision,
        )
        self._changed(new, [JobEvent(JobEventKind.MOVED, job, new.revision) for job in moved.values()])
        return canonical, list(moved.values())

    # --- plumbing -----------------------------------------------------------
    def _writable(self) -> Intent:
        """The intent to change (under the lock): raises NotLeader where this
        replica may not change it, and reloads first if the store may hold more."""
        self.gate()
        if self._stale:
            old = self._intent
            self._reload()
            self._tell(old, self._intent)
        return self._intent

    def _commit(self, new: Intent, change: Change) -> None:
        """Persist, then publish: a failed write leaves the snapshot as it was,
        and the next change reloads first, in case the store has it anyway."""
        try:
            self._store.apply(change, new.revision)
        except StoreError:
            self._stale = True
            raise
        self._intent = new

    def resync(self) -> None:
        """Reload intent from the store, which another replica (the leader)
        changed, and tell listeners the job events between the two, so a
        follower's WatchJobs streams what the leader's does."""
        with self._lock:
            old = self._intent
            self._reload()
            new = self._intent
        self._tell(old, new)

    def follow(self, change: Change, revision: int) -> None:
        """A change another replica stored (a follower's watch), applied
        without reloading, and its job events told. BadStoredValue (nothing
        applied) if one of its records does not decode."""
        with self._lock:
            old = self._intent
            done = follow(self.fabric, old, self._retired, self._usage, change, revision, self._metrics)
            self._intent, self._retired = done.intent, done.retired
            for job in done.removed:
                self._ledger.add(job, sign=-1.0)
                self._usage.remove(job)
            for job in done.placed:
                self._ledger.add(job)
                self._usage.add(job)
        moved = {job.job_id for job in done.removed} & {job.job_id for job in done.placed}
        events = [JobEvent(JobEventKind.RELEASED, job, revision) for job in done.removed if job.job_id not in moved]
        events += [
            JobEvent(JobEventKind.MOVED if job.job_id in moved else JobEventKind.PLACED, job, revision)
            for job in done.placed
        ]
        self._changed(done.intent, events)

    def mark_stale(self) -> None:
        """Someone else wrote to the store: reload before the next change."""
        self._stale = True

    @property
    def stale(self) -> bool:
        """A write's outcome is unknown: the store may hold a change this replica has not loaded."""
        return self._stale

    def _tell(self, old: Intent, new: Intent) -> None:
        """The job events from `old` to `new` (one reload), to every listener."""
        if new.revision == old.revision:
            return
        events = [
            JobEvent(JobEventKind.RELEASED, job, new.revision) for jid, job in old.jobs.items() if jid not in new.jobs
        ]
        for jid, job in new.jobs.items():
            before = old.jobs.get(jid)
            if before is None:
                events.append(JobEvent(JobEventKind.PLACED, job, new.revision))
            elif before != job:
                events.append(JobEvent(JobEventKind.MOVED, job, new.revision))
        self._changed(new, events)

    def _reload(self) -> None:
        """The intent as stored, and what is kept in step with its jobs: the
        ledger and usage, so placement does not re-add every job's demand,
        rescan every loaded link or recount every GPU on each request (each
        of those dominates on a 16k-GPU fabric)."""
        self._intent, self._retired = intent_from_store(self.fabric, self._store, self._metrics)
        self._ledger = LoadLedger(self.fabric, self._intent.jobs.values())
        self._usage = Usage.of(self._intent.jobs.values())
        self._stale = False

    def _changed(self, intent: Intent, events: list[JobEvent]) -> None:
        allocated = [e.job for e in events if e.kind in (JobEventKind.PLACED, JobEventKind.RELEASED)]
        self.events.publish(intent, events)
        self._publish_counts({(g.nic.pod, g.nic.rail) for job in allocated for g in job.gpus})

    def _publish_counts(self, pod_rails: Iterable[tuple[int, int]] | None = None) -> None:
        """Gauges from the intent and its watch history. The allocation
        gauges (one per pod and rail: hundreds on a large fabric) only where
        GPUs changed hands, unless `pod_rails` is None (at start)."""
        intent = self._intent
        for kind, count in intent.object_counts().items():
            self._metrics.intent_objects.labels(kind).set(count)
        self._metrics.jobs_active.set(len(intent.jobs))
        self._metrics.intent_revision.set(intent.revision)
        for unit, size in zip(("events", "items"), self.events.held(), strict=True):
            self._metrics.watch_history.labels(unit).set(size)
        held = self._usage.held
        for pod, rail in self.fabric.pod_rails if pod_rails is None else pod_rails:
            self._metrics.gpus_allocated.labels(str(pod), str(rail)).set(held.get((pod, rail), 0))
        self._metrics.predicted_max_utilization.set(self._ledger.peak())
