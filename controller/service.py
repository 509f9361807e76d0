"""The one code path that changes intent: validate, persist, publish.

The gRPC API and tests call this; nothing else mutates intent. A change is
validated against the fabric first and persisted before the in-memory
snapshot moves, so a rejected or failed request leaves both untouched. After
each change, listeners (the reconciler) are told; they read the snapshot.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from controller.errors import FieldError
from controller.fabric import Fabric
from controller.intent import FlowPin, Intent, pin_from_doc, pin_to_doc, validate_pin
from controller.metrics import Metrics
from controller.store import Change, IntentStore

log = logging.getLogger(__name__)


def intent_from_store(fabric: Fabric, store: IntentStore, metrics: Metrics) -> Intent:
    """Stored intent, minus records this fabric cannot honour (e.g. the spec
    shrank). Those stay in the store, untouched, and are reported; one bad
    record must not stop the controller from serving the rest."""
    snapshot = store.load()
    pins = {}
    for (kind, name), doc in snapshot.records.items():
        if kind != "pin":
            continue
        try:
            pin = pin_from_doc(name, doc)
            # Alone, not against the others: stored pins were checked for
            # overlap when written, and this keeps loading linear.
            validate_pin(fabric, Intent(), pin)
        except (KeyError, ValueError, TypeError, FieldError) as exc:
            log.error("stored pin %r ignored: %s", name, exc)
            metrics.errors.labels("intent", "invalid_stored_intent").inc()
            continue
        pins[name] = pin
    return Intent(pins=pins, revision=snapshot.revision)


class IntentService:
    def __init__(self, fabric: Fabric, store: IntentStore, metrics: Metrics) -> None:
        self.fabric = fabric
        self._store = store
        self._metrics = metrics
        self._lock = threading.Lock()
        self._intent = intent_from_store(fabric, store, metrics)
        self._listeners: list[Callable[[Intent], None]] = []
        self._publish_counts()

    def snapshot(self) -> Intent:
        return self._intent

    def subscribe(self, listener: Callable[[Intent], None]) -> None:
        self._listeners.append(listener)

    def pin_flow(self, pin: FlowPin) -> FlowPin:
        """Creates or moves a pin. Re-sending an identical pin changes nothing."""
        with self._lock:
            current = self._intent
            validate_pin(self.fabric, current, pin)
            if current.pins.get(pin.name) == pin:
                return pin
            new = current.with_pin(pin)
            self._store.apply(Change(puts={("pin", pin.name): pin_to_doc(pin)}), new.revision)
            self._intent = new
        log.info("pin %s: %s via %s (revision %d)", pin.name, pin.match.describe(), pin.spine, new.revision)
        self._changed(new)
        return pin

    def unpin(self, name: str) -> FlowPin:
        with self._lock:
            current = self._intent
            new = current.without_pin(name)  # raises NotFound
            self._store.apply(Change(puts={}, deletes=frozenset({("pin", name)})), new.revision)
            self._intent = new
        log.info("unpin %s (revision %d)", name, new.revision)
        self._changed(new)
        return current.pins[name]

    def _changed(self, intent: Intent) -> None:
        self._publish_counts()
        for listener in self._listeners:
            listener(intent)

    def _publish_counts(self) -> None:
        for kind, count in self._intent.object_counts().items():
            self._metrics.intent_objects.labels(kind).set(count)
