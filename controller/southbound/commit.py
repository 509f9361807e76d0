"""A reconcile pass's last stage: its plan sent to the switches, in an order
no packet notices.

Split from reconciler.py, which decides when a pass runs and over which
switches (sessions, role claims, triggers): this module knows only the
order of the messages and what each outcome means for the known tables.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from controller.fabric import Fabric
from controller.intent.model import Intent
from controller.metrics import Metrics
from controller.southbound import ofcodec, wire
from controller.southbound.fanout import fan_out
from controller.southbound.overlay import EntryKey, OverlayEntry, OverlayMeter
from controller.southbound.reconcile import (
    FlowModKind,
    MeterDelta,
    SwitchDelta,
    order_for_adds,
    order_for_deletes,
    tiers,
)
from controller.southbound.switches import SwitchError, SwitchSession
from controller.southbound.tables import Failed, KnownTables


@dataclass(frozen=True)
class OverlayPlan:
    """One pass's plan: the overlay wanted on each switch whose table is known, and the difference."""

    te_generation: int  # of the TE moves and meters planned for (TePlanner.applied)
    intent: Intent
    desired: dict[str, dict[EntryKey, OverlayEntry]]  # switch -> the overlay entries it should hold
    meters: dict[str, dict[int, OverlayMeter]]  # switch -> its meters
    deltas: dict[str, SwitchDelta]
    meter_deltas: dict[str, MeterDelta]


class OverlayCommit:
    def __init__(self, fabric: Fabric, metrics: Metrics, max_in_flight: int) -> None:
        self.fabric = fabric
        self.metrics = metrics
        self.max_in_flight = max_in_flight

    def apply(
        self, sessions: Mapping[str, SwitchSession], plan: OverlayPlan, tables: KnownTables, failed: Failed
    ) -> set[str]:
        """Sends the plan; the switches that ended in sync (the others' tables
        are unknown now, and read again next pass).

        Meters exist before the entries that use them and go after them (a
        switch refuses an entry naming a missing meter, and deleting a meter
        deletes every entry that uses it). Each step is in flight on every
        switch at once; across switches only the tiers' order matters."""
        deltas, meter_deltas = plan.deltas, plan.meter_deltas
        in_sync = set(deltas)
        upserts = {
            n: [("add", m) for m in d.adds] + [("modify", m) for m in d.changes] for n, d in meter_deltas.items()
        }
        in_sync -= self._send_meters(sessions, upserts, failed)
        for tier_group in tiers(self.fabric, order_for_adds(self.fabric, in_sync)):
            in_sync -= self._commit(sessions, {n: deltas[n].adds for n in tier_group}, FlowModKind.ADD, failed)
        for tier_group in tiers(self.fabric, order_for_deletes(self.fabric, in_sync)):
            in_sync -= self._commit(sessions, {n: deltas[n].deletes for n in tier_group}, FlowModKind.DELETE, failed)
        deletes = {n: [("delete", m) for m in meter_deltas[n].deletes] for n in in_sync}
        in_sync -= self._send_meters(sessions, deletes, failed)
        for name in deltas:
            if name in in_sync:
                tables[name].apply(deltas[name], plan.meters[name])
                self.metrics.entries_installed.labels(name).set(len(plan.desired[name]))
            else:
                tables.forget(name)  # unknown now: read it again next pass
        return in_sync

    def _send_meters(
        self, sessions: Mapping[str, SwitchSession], mods: dict[str, list[tuple[str, OverlayMeter]]], failed: Failed
    ) -> set[str]:
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
        bad = set()
        for name, result in fan_out(starts, self.max_in_flight).items():
            if isinstance(result, SwitchError):
                failed(name, result, "meter_mod_failed")
                bad.add(name)
                continue
            for kind, _ in mods[name]:
                self.metrics.meter_mods.labels(name, kind).inc()
        return bad

    def _commit(
        self,
        sessions: Mapping[str, SwitchSession],
        entries: dict[str, tuple[OverlayEntry, ...]],
        kind: FlowModKind,
        failed: Failed,
    ) -> set[str]:
        """One bundle per switch, all in flight at once; the switches that failed."""
        encode = wire.add_flow if kind is FlowModKind.ADD else wire.delete_flow
        starts = {
            n: functools.partial(sessions[n].start_bundle, [encode(e) for e in es]) for n, es in entries.items() if es
        }
        bad = set()
        for name, result in fan_out(starts, self.max_in_flight).items():
            if isinstance(result, SwitchError):
                failed(name, result, "bundle_failed")
                self.metrics.bundles.labels(name, "failed").inc()
                bad.add(name)
                continue
            self.metrics.bundles.labels(name, "ok").inc()
            self.metrics.flow_mods.labels(name, kind).inc(len(entries[name]))
        return bad
