"""The controller's underlay (`controller run --underlay`), on the switches:
read, diffed and put right like the overlay, by the reconciler's thread.

A switch is read (its underlay-cookie entries and Railyard's group range)
when it connects or this replica starts leading, and a rotating share of the
switches on each periodic pass. The difference goes out make-before-break:
groups added or changed (and a barrier) before the routes that use them, in
one bundle; routes nobody wants deleted before their groups are. A switch
already right gets nothing: a restarted controller sends 0 flow-mods and 0
group-mods. Nothing else is read or written: not the overlay's entries
(another owner kind), not anyone else's groups (another id range).

What OpenFlow 1.3 cannot carry: a group's selection method. A group this
controller creates hashes as the switch does by default (Open vSwitch: its
dp_hash of the 5-tuple; an ASIC: its ECMP hash, seeded by the switch's own
configuration); the emulation installs the spec's hash fields and per-tier
basis over OpenFlow 1.5 (emulation/net/underlay.py). A group found with the
right buckets is kept as it is, whatever its method. With `Ecmp.OVS_BUNDLE`
the routes carry Open vSwitch's bundle action instead and the controller
wants no group: any left in its range from a group underlay is deleted.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping

from controller.fabric import Fabric
from controller.metrics import Metrics
from controller.southbound import ofcodec, wire
from controller.southbound.fanout import fan_out
from controller.southbound.ofcodec import GroupShape
from controller.southbound.overlay import EntryKey, OverlayEntry
from controller.southbound.reconcile import SwitchDelta, diff_table
from controller.southbound.switches import SwitchError, SwitchSession, overlay_table
from controller.southbound.tables import Failed
from controller.southbound.underlay import Ecmp, SwitchUnderlay, build_underlay, is_underlay_group, underlay_entries

log = logging.getLogger(__name__)

GROUP_MOD_KINDS = ("add", "modify", "delete")


class UnderlaySync:
    def __init__(self, fabric: Fabric, metrics: Metrics, audit_every: int, max_in_flight: int, ecmp: Ecmp) -> None:
        self.metrics = metrics
        self.audit_every = audit_every
        self.max_in_flight = max_in_flight
        self.fabric, self.ecmp = fabric, ecmp
        self.reserved: Mapping[str, frozenset[int]] = {}
        self.tables: dict[str, SwitchUnderlay] = {}
        self._entries: dict[str, dict[EntryKey, OverlayEntry]] = {}
        self._groups: dict[str, dict[int, GroupShape]] = {}
        self._synced: dict[str, SwitchSession] = {}  # switch -> the session it was last found or made right on
        self.reserve({})
        self._passes = 0
        for name in fabric.switches:
            for kind in GROUP_MOD_KINDS:
                metrics.group_mods.labels(name, kind)

    def reserve(self, reserved: Mapping[str, frozenset[int]]) -> None:
        """Keeps the hash off these ports (controller/te/headroom.py): the
        switches whose routes or groups change are put right on the next sync."""
        if reserved == self.reserved and self.tables:
            return
        self.reserved = reserved
        tables = build_underlay(self.fabric, self.ecmp, reserved)
        for name, table in tables.items():
            if table != self.tables.get(name):
                self.tables[name] = table
                self._entries[name] = underlay_entries(table)
                self._groups[name] = {g.group_id: ofcodec.select_group_shape(g.ports) for g in table.groups}
                self.forget(name)

    def forget(self, name: str) -> None:
        self._synced.pop(name, None)

    def sync(self, sessions: dict[str, SwitchSession], periodic: bool, failed: Failed) -> set[str]:
        """Puts the underlay right on the switches that need a look; the switches that failed."""
        need = {n for n, s in sessions.items() if self._synced.get(n) is not s}
        if periodic:
            self._passes += 1
            known = sorted(set(sessions) - need)
            share = -(-len(known) // self.audit_every)
            start = (self._passes * share) % len(known) if known else 0
            need.update((known[start:] + known[:start])[:share])
        if not need:
            return set()
        bad: set[str] = set()
        flows = fan_out({n: sessions[n].start_underlay_dump for n in need}, self.max_in_flight)
        groups = fan_out({n: sessions[n].start_group_dump for n in need}, self.max_in_flight)
        plans = {}
        for name in need:
            stats, group_stats = flows[name], groups[name]
            for result in (stats, group_stats):
                if isinstance(result, SwitchError):
                    failed(name, result, "dump_failed")
                    bad.add(name)
            if name in bad:
                continue
            assert not isinstance(stats, SwitchError) and not isinstance(group_stats, SwitchError)
            installed = {g.group_id: ofcodec.group_from_stats(g) for g in group_stats if is_underlay_group(g.group_id)}
            plans[name] = (diff_table(name, self._entries[name], overlay_table(name, stats)), installed)
        bad |= self._apply(sessions, plans, failed)
        for name in need - bad:
            self._synced[name] = sessions[name]
        return bad

    def _apply(
        self,
        sessions: Mapping[str, SwitchSession],
        plans: dict[str, tuple[SwitchDelta, dict[int, GroupShape]]],
        failed: Failed,
    ) -> set[str]:
        bad: set[str] = set()
        upserts, deletes = {}, {}
        for name, (_, installed) in plans.items():
            wanted = self._groups[name]
            upserts[name] = [("add" if gid not in installed else "modify", gid)
                             for gid, shape in sorted(wanted.items()) if installed.get(gid) != shape]  # fmt: skip
            deletes[name] = [("delete", gid) for gid in sorted(installed.keys() - wanted.keys())]
        bad |= self._group_mods(sessions, upserts, failed)
        adds = {n: [wire.add_flow(e) for e in d.adds] for n, (d, _) in plans.items() if n not in bad and d.adds}
        bad |= self._bundles(sessions, adds, "add", failed)
        dels = {
            n: [wire.delete_flow(e) for e in d.deletes] for n, (d, _) in plans.items() if n not in bad and d.deletes
        }
        bad |= self._bundles(sessions, dels, "delete", failed)
        bad |= self._group_mods(sessions, {n: m for n, m in deletes.items() if n not in bad}, failed)
        for name, (delta, _) in plans.items():
            if name not in bad and (not delta.empty or upserts[name] or deletes[name]):
                log.info(
                    "underlay %s: +%d -%d routes, groups %s",
                    name,
                    len(delta.adds),
                    len(delta.deletes),
                    ", ".join(f"{k} {g:#x}" for k, g in upserts[name] + deletes[name]) or "right",
                )
        return bad

    def _group_mods(
        self, sessions: Mapping[str, SwitchSession], mods: dict[str, list[tuple[str, int]]], failed: Failed
    ) -> set[str]:
        tables = self.tables
        starts = {
            n: functools.partial(
                sessions[n].start_confirmed,
                [
                    ofcodec.select_group_mod(
                        sessions[n].datapath, gid, next((g.ports for g in tables[n].groups if g.group_id == gid), ()), k
                    )
                    for k, gid in ms
                ],
                "group mods",
            )
            for n, ms in mods.items()
            if ms
        }
        bad = set()
        for name, result in fan_out(starts, self.max_in_flight).items():
            if isinstance(result, SwitchError):
                failed(name, result, "group_mod_failed")
                bad.add(name)
                continue
            for kind, _ in mods[name]:
                self.metrics.group_mods.labels(name, kind).inc()
        return bad

    def _bundles(
        self, sessions: Mapping[str, SwitchSession], mods: dict[str, list[bytes]], kind: str, failed: Failed
    ) -> set[str]:
        starts = {n: functools.partial(sessions[n].start_bundle, ms) for n, ms in mods.items()}
        bad = set()
        for name, result in fan_out(starts, self.max_in_flight).items():
            if isinstance(result, SwitchError):
                failed(name, result, "underlay_commit_failed")
                self.metrics.bundles.labels(name, "failed").inc()
                bad.add(name)
                continue
            self.metrics.bundles.labels(name, "ok").inc()
            self.metrics.flow_mods.labels(name, kind).inc(len(mods[name]))
        return bad
