"""Reading stored intent back: every record checked against the fabric as
it is now, and what cannot be honoured left in the store and reported."""

from __future__ import annotations

import logging

from controller.errors import RailyardError
from controller.fabric import Fabric, NicId
from controller.intent.drains import resolve_link, resolve_switch
from controller.intent.model import Intent, RecordKind, pin_from_doc, validate_pin
from controller.intent.retries import Retired, retired_from_doc
from controller.intent.store import IntentStore
from controller.metrics import Metrics
from controller.te.jobs import Drains, job_from_doc

log = logging.getLogger(__name__)


def intent_from_store(fabric: Fabric, store: IntentStore, metrics: Metrics) -> tuple[Intent, dict[str, Retired]]:
    """Stored intent, minus records this fabric cannot honour (e.g. the spec
    shrank), and the retry keys of released jobs. Records that cannot be
    honoured stay in the store, untouched, and are reported; one bad record
    must not stop the controller from serving the rest."""
    snapshot = store.load()
    pins, jobs, drained_switches, drained_links = {}, {}, set(), set()
    retired: dict[str, Retired] = {}
    gpu_holder: dict[NicId, str] = {}  # a GPU (by its NIC) -> the job holding it
    for (stored_kind, name), doc in snapshot.records.items():
        try:
            kind = RecordKind(stored_kind)  # ValueError for a kind this version does not know
            if kind is RecordKind.PIN:
                pin = pin_from_doc(name, doc)
                # Alone, not against the others: stored pins were checked for
                # overlap when written, and this keeps loading linear.
                validate_pin(fabric, Intent(), pin)
                pins[name] = pin
            elif kind is RecordKind.JOB:
                job = job_from_doc(name, doc)
                for flow in job.flows:
                    fabric.egress_path(flow.src, flow.dst, flow.via or None)
                # Two writers on one store could each have handed out the same
                # GPUs: the first job (by name) keeps them, the other is not loaded.
                taken = sorted({gpu_holder[g.nic] for g in job.gpus if g.nic in gpu_holder})
                if taken:
                    raise ValueError(f"its GPUs are already held by job(s) {', '.join(taken)}")
                gpu_holder.update((g.nic, name) for g in job.gpus)
                jobs[name] = job
            elif kind is RecordKind.DRAINED_SWITCH:
                drained_switches.add(resolve_switch(fabric, name))
            elif kind is RecordKind.DRAINED_LINK:
                drained_links.add(resolve_link(fabric, name))
            else:
                retired[name] = retired_from_doc(name, doc)
        # A document of the wrong shape, or naming what this fabric does not have.
        except (KeyError, ValueError, TypeError, RailyardError) as exc:
            log.error("stored %s %r ignored: %s", stored_kind, name, exc)
            metrics.errors.labels("intent", "invalid_stored_intent").inc()
    for stored_kind, name in snapshot.unreadable:
        log.error("stored %s %r ignored: its record is not valid JSON", stored_kind, name)
        metrics.errors.labels("intent", "invalid_stored_intent").inc()
    drains = Drains(frozenset(drained_switches), frozenset(drained_links))
    return Intent(pins=pins, jobs=jobs, drains=drains, revision=snapshot.revision), retired
