"""Job events: who is told of them, the last ones (for watches that start
from a revision), and which jobs the fabric holds (programmed).

The intent service publishes each change's events here after the change is
stored; the reconciler marks jobs programmed. Events are appended and handed
to listeners under one lock, so a watch that subscribes and copies the
history under it sees each event once, either replayed or live.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from controller.errors import RevisionGone
from controller.intent.model import Intent
from controller.te.jobs import Job


class JobEventKind(StrEnum):
    PLACED = "placed"
    MOVED = "moved"  # its paths moved (a drain)
    RELEASED = "released"
    # Every switch carrying its entries holds them (the reconciler says so).
    # A state of the fabric, not a change of intent: never in the history.
    PROGRAMMED = "programmed"


@dataclass(frozen=True)
class JobEvent:
    kind: JobEventKind
    job: Job
    revision: int


Listener = Callable[[Intent, list[JobEvent]], None]


WATCH_HISTORY = 4096  # job events a watch can replay from
# ... and GPUs plus flows over those events' jobs, at most: a history bounded
# by events alone holds whatever the jobs weigh (4,096 events of 1,024-GPU
# rings are some 8 million objects, gigabytes). At the soak's 8-64 GPUs a
# job, the events fill it first.
WATCH_HISTORY_ITEMS = 1 << 18


def weight(event: JobEvent) -> int:
    """What an event holds on to, in GPUs and flows."""
    return len(event.job.gpus) + len(event.job.flows)


class JobEvents:
    def __init__(
        self, intent: Callable[[], Intent], history: int = WATCH_HISTORY, items: int = WATCH_HISTORY_ITEMS
    ) -> None:
        """`intent`: the current intent (the service's snapshot), read under
        this object's lock. The history keeps the last `history` events,
        fewer where their jobs weigh over `items` (GPUs and flows), and
        always the last one."""
        self._intent = intent
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        # Every event after `_history_from` is in `_history`.
        self._history: deque[JobEvent] = deque()
        self._history_from = intent().revision
        self._events, self._items, self._weight = history, items, 0
        self._programmed: dict[str, int] = {}  # job id -> the intent revision the fabric held it at

    def held(self) -> tuple[int, int]:
        """The history's size: events, and what their jobs weigh (GPUs and flows)."""
        with self._lock:
            return len(self._history), self._weight

    def subscribe(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.remove(listener)

    def watch_from(self, since: int, listener: Listener) -> list[JobEvent]:
        """Subscribes `listener` and returns the job events after revision
        `since`: together, every event after it exactly once. Raises
        RevisionGone if the history no longer reaches back to it, or it is
        ahead of the intent."""
        with self._lock:
            intent = self._intent()
            if since > intent.revision:
                raise RevisionGone(f"revision {since} is ahead of the intent's ({intent.revision}); list again")
            if since < self._history_from:
                raise RevisionGone(
                    f"revision {since} is older than the watch history, which starts after revision "
                    f"{self._history_from} (the last {len(self._history)} job events); list again"
                )
            self._listeners.append(listener)
            replay = [event for event in self._history if event.revision > since]
            # PROGRAMMED is a state: each job programmed at or after `since`
            # (which a client that listed at `since` may not have seen).
            return replay + [
                JobEvent(JobEventKind.PROGRAMMED, intent.jobs[job_id], revision)
                for job_id, revision in sorted(self._programmed.items(), key=lambda item: item[1])
                if revision >= since and job_id in intent.jobs
            ]

    def programmed_revision(self, job: Job) -> int:
        """The intent revision at which the fabric held every entry of `job`
        (this very placement of it); 0 while it does not (yet), or once it
        moved or went."""
        revision = self._programmed.get(job.job_id, 0)
        return revision if self._intent().jobs.get(job.job_id) is job else 0

    def mark_programmed(self, jobs: Iterable[tuple[Job, int]]) -> None:
        """The reconciler's word that each job (the very object it read from
        the intent) is on every switch it uses, as of an intent revision.
        A job that changed or went since is not marked: it must be
        programmed again."""
        with self._lock:
            intent = self._intent()
            events = []
            for job, revision in jobs:
                if intent.jobs.get(job.job_id) is job and job.job_id not in self._programmed:
                    self._programmed[job.job_id] = revision
                    events.append(JobEvent(JobEventKind.PROGRAMMED, job, revision))
            if events:
                for listener in list(self._listeners):
                    listener(intent, events)

    def publish(self, intent: Intent, events: list[JobEvent]) -> None:
        """A stored change's events, into the history and to every listener."""
        with self._lock:
            for event in events:
                self._programmed.pop(event.job.job_id, None)  # placed, moved or released: not on the fabric yet
                self._history.append(event)
                self._weight += weight(event)
            while len(self._history) > 1 and (len(self._history) > self._events or self._weight > self._items):
                gone = self._history.popleft()  # the oldest goes: the history starts after it
                self._history_from, self._weight = gone.revision, self._weight - weight(gone)
            for listener in list(self._listeners):
                listener(intent, events)
