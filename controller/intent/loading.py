"""Reading stored intent back: each record decoded where it is read, then
checked against the fabric as it is now.

Two kinds of trouble, two answers:
- a record that does not decode (not JSON, not the shape of its kind) is a
  BadStoredValue naming it, and nothing is loaded past it: it may hold GPUs
  or steer traffic, and guessing would hand them out twice;
- a well-formed record this fabric cannot honour (the spec shrank, two
  writers once shared a GPU) is left in the store, untouched, and reported;
  one such record must not stop the controller from serving the rest.

The same rules serve a whole load and a follower's change at a time
(`follow`), so a replica following the store holds what a reload would.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from controller.errors import FieldError, NotFound, RailyardError
from controller.fabric import Fabric, NicId
from controller.intent.drains import resolve_link, resolve_switch
from controller.intent.model import FlowPin, Intent, RecordKind, pin_from_doc, validate_pin
from controller.intent.retries import Retired, retired_from_doc
from controller.intent.store import BadStoredValue, Change, IntentStore
from controller.metrics import Metrics
from controller.te.capacity import Usage
from controller.te.jobs import Drains, Job, job_from_doc

log = logging.getLogger(__name__)

Record = FlowPin | Job | Retired | str  # a drain record is its switch or link name
DECODERS: dict[str, Callable[[str, Mapping], Record]] = {
    RecordKind.PIN: pin_from_doc,
    RecordKind.JOB: job_from_doc,
    RecordKind.RETIRED: retired_from_doc,
    RecordKind.DRAINED_SWITCH: lambda name, doc: name,
    RecordKind.DRAINED_LINK: lambda name, doc: name,
}
# What a well-formed record that cannot be honoured raises (NotFound: a
# switch or link this fabric lacks).
UNHONOURED = (KeyError, ValueError, LookupError, FieldError, NotFound)


def decode(kind: str, name: str, doc: Mapping) -> Record | None:
    """A stored document as what it records (None: a kind this version does
    not know, reported and skipped). BadStoredValue if it does not decode."""
    decoder = DECODERS.get(kind)
    if decoder is None:
        return None
    try:
        return decoder(name, doc)
    except (KeyError, ValueError, TypeError, AttributeError, IndexError, RailyardError) as exc:
        raise BadStoredValue(f"stored {kind} {name!r} is not a valid {kind} record: {_reason(exc)}") from None


def _reason(exc: Exception) -> str:
    return f"no field {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {str(exc)[:120]}"


def _unhonoured(kind: str, name: str, why: object, metrics: Metrics) -> None:
    log.error("stored %s %r ignored: %s", kind, name, why)
    metrics.errors.labels("intent", "invalid_stored_intent").inc()


def intent_from_store(fabric: Fabric, store: IntentStore, metrics: Metrics) -> tuple[Intent, dict[str, Retired]]:
    """Stored intent, minus records this fabric cannot honour, and the retry
    keys of released jobs. BadStoredValue (from the store, or here) if a
    value does not decode."""
    snapshot = store.load()
    decoded = {key: decode(key[0], key[1], doc) for key, doc in snapshot.records.items()}
    loaded = follow_records(fabric, Intent(), {}, Usage(), decoded, frozenset(), snapshot.revision, metrics)
    return loaded.intent, loaded.retired


@dataclass(frozen=True)
class Followed:
    """The intent after one stored change, and the jobs it placed and took
    away (a moved job is both: its old version taken, its new one placed)."""

    intent: Intent
    retired: dict[str, Retired]
    placed: tuple[Job, ...]
    removed: tuple[Job, ...]


def follow(
    fabric: Fabric,
    intent: Intent,
    retired: Mapping[str, Retired],
    usage: Usage,
    change: Change,
    revision: int,
    metrics: Metrics,
) -> Followed:
    """`intent` with a change another replica stored applied to it, checked
    as a load would (BadStoredValue before anything is applied). `usage`
    holds `intent`'s jobs; it is read, not changed."""
    decoded = {key: decode(key[0], key[1], doc) for key, doc in change.puts.items()}
    return follow_records(fabric, intent, retired, usage, decoded, change.deletes, revision, metrics)


def follow_records(
    fabric: Fabric,
    intent: Intent,
    retired: Mapping[str, Retired],
    usage: Usage,
    puts: Mapping[tuple[str, str], Record | None],
    deletes: frozenset[tuple[str, str]],
    revision: int,
    metrics: Metrics,
) -> Followed:
    pins, jobs = dict(intent.pins), dict(intent.jobs)
    switches, links = set(intent.drains.switches), set(intent.drains.links)
    kept = dict(retired)
    removed: dict[str, Job] = {}
    replaced = {key for key, record in puts.items() if key[0] == RecordKind.JOB and record != jobs.get(key[1])}
    for kind, name in deletes | replaced:
        if kind == RecordKind.JOB and name in jobs:
            removed[name] = jobs.pop(name)
        elif kind == RecordKind.PIN:
            pins.pop(name, None)
        elif kind == RecordKind.RETIRED:
            kept.pop(name, None)
        elif kind in (RecordKind.DRAINED_SWITCH, RecordKind.DRAINED_LINK):
            (switches if kind == RecordKind.DRAINED_SWITCH else links).discard(name)  # stored under its canonical name
    placed: list[Job] = []
    holders = _Holders(usage, removed)
    for (kind, name), record in sorted(puts.items(), key=lambda item: item[0]):
        try:
            if record is None:
                raise ValueError(f"unknown record kind {kind!r}")
            if isinstance(record, FlowPin):
                # Alone, not against the others: stored pins were checked for
                # overlap when written, and this keeps loading linear.
                validate_pin(fabric, Intent(), record)
                pins[name] = record
            elif isinstance(record, Job):
                if jobs.get(name) == record:
                    continue  # as held already
                for flow in record.flows:
                    fabric.egress_path(flow.src, flow.dst, flow.via or None)
                holders.take(record)
                jobs[name] = record
                placed.append(record)
            elif isinstance(record, Retired):
                kept[name] = record
            else:
                (switches if kind == RecordKind.DRAINED_SWITCH else links).add(_canonical(fabric, kind, record))
        except UNHONOURED as exc:
            _unhonoured(kind, name, exc, metrics)
    drains = Drains(frozenset(switches), frozenset(links))
    new = replace(intent, pins=pins, jobs=jobs, drains=drains, revision=revision)
    return Followed(new, kept, tuple(placed), tuple(removed.values()))


def _canonical(fabric: Fabric, kind: str, name: str) -> str:
    return resolve_switch(fabric, name) if kind == RecordKind.DRAINED_SWITCH else resolve_link(fabric, name)


class _Holders:
    """Which job holds each GPU while a change is applied: two writers on one
    store could each have handed out the same GPUs; the job already held
    (or, within one change, the first by name) keeps them."""

    def __init__(self, usage: Usage, removed: Mapping[str, Job]) -> None:
        self.usage = usage
        self.freed = {(g.nic.pod, g.nic.server, g.nic.rail) for job in removed.values() for g in job.gpus}
        self.taken: dict[NicId, str] = {}

    def take(self, job: Job) -> None:
        clashes = set()
        for gpu in job.gpus:
            nic = gpu.nic
            holder = self.taken.get(nic)
            if holder is None and (nic.pod, nic.server, nic.rail) not in self.freed:
                holder = self.usage.used.get((nic.pod, nic.server), {}).get(nic.rail)
            if holder is not None and holder != job.job_id:
                clashes.add(holder)
        if clashes:
            raise ValueError(f"its GPUs are already held by job(s) {', '.join(sorted(clashes))}")
        self.taken.update((g.nic, job.job_id) for g in job.gpus)
