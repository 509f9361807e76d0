"""The flow-mods a TE cycle would send: the overlay the real code renders
for the engine's moves and meters, diffed against the previous cycle's by
the reconciler's own diff. Pure.

Rendering every move on every change costs in proportion to all moves (on
a 16K-GPU fabric, thousands), so moves are rendered in groups that do not
depend on each other and only changed groups are rendered again: a move's
entries depend on nothing but its flow, its via, whether the reverse flow
is moved too (then its ACKs need no entries of their own; the two render
together) and its meter. With meters present the whole overlay is
rendered by `desired_overlay` and diffed switch by switch; the test suite
checks the two ways agree.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller.fabric import Fabric
from controller.intent.model import Intent
from controller.southbound.overlay import (
    EntryKey,
    OverlayEntry,
    OverlayMemo,
    OverlayMeter,
    desired_meters,
    desired_overlay,
    te_entries,
)
from controller.southbound.reconcile import diff_meters, diff_table
from controller.te.engine import Meter, Move
from controller.te.view import FlowKey, reverse_key

Tables = dict[str, dict[EntryKey, OverlayEntry]]
Group = tuple[tuple[FlowKey, str], ...]  # (flow key, via) of the moves rendered together


def groups_of(moves: Mapping[FlowKey, Move]) -> dict[Group, tuple[Move, ...]]:
    out: dict[Group, tuple[Move, ...]] = {}
    for key, move in moves.items():
        reverse = moves.get(reverse_key(key))
        if reverse is not None and reverse.key < key:
            continue  # rendered with the reverse flow's move
        members = (move,) if reverse is None else (move, reverse)
        out[tuple((m.key, m.via) for m in members)] = members
    return out


class FlowModCounter:
    def __init__(self, fabric: Fabric, intent: Intent) -> None:
        self.fabric = fabric
        self.intent = intent
        self.memo = OverlayMemo()
        self.tables: Tables = desired_overlay(fabric, intent, self.memo)
        self.placement_mods = sum(len(t) for t in self.tables.values())
        self.meters: dict[str, dict[int, OverlayMeter]] = {name: {} for name in fabric.switches}
        self.rendered: dict[Group, list[OverlayEntry]] | None = {}  # None: unknown (after a metered pass)

    def update(self, moves: Mapping[FlowKey, Move], meters: Mapping[FlowKey, Meter]) -> tuple[int, int]:
        """(flow-mods, meter-mods) to go from the last pass's overlay to this one's."""
        if meters or self.rendered is None or self.intent.pins:
            return self._full(moves, meters)
        return self._incremental(moves), 0

    def _full(self, moves: Mapping[FlowKey, Move], meters: Mapping[FlowKey, Meter]) -> tuple[int, int]:
        desired = desired_overlay(self.fabric, self.intent, self.memo, moves.values(), meters.values())
        flow_mods = 0
        for switch, table in desired.items():
            before = self.tables.get(switch, {})
            if table != before:
                delta = diff_table(switch, table, before)
                flow_mods += len(delta.adds) + len(delta.deletes)
        self.tables = desired
        new_meters = desired_meters(self.fabric, meters.values())
        meter_mods = 0
        for switch, wanted in new_meters.items():
            before_meters = self.meters.get(switch, {})
            if wanted != before_meters:
                mdelta = diff_meters(wanted, before_meters)
                meter_mods += len(mdelta.adds) + len(mdelta.changes) + len(mdelta.deletes)
        self.meters = new_meters
        # Back to rendering by groups once nothing is metered (one more render).
        self.rendered = (
            None
            if meters or self.intent.pins
            else {g: te_entries(self.fabric, members) for g, members in groups_of(moves).items()}
        )
        return flow_mods, meter_mods

    def _incremental(self, moves: Mapping[FlowKey, Move]) -> int:
        assert self.rendered is not None
        groups = groups_of(moves)
        gone = [g for g in self.rendered if g not in groups]
        new = {g: te_entries(self.fabric, members) for g, members in groups.items() if g not in self.rendered}
        removed: dict[str, dict[EntryKey, OverlayEntry]] = {}
        added: dict[str, dict[EntryKey, OverlayEntry]] = {}
        for g in gone:
            for entry in self.rendered.pop(g):
                removed.setdefault(entry.switch, {})[entry.key] = entry
        for entries in new.values():
            for entry in entries:
                added.setdefault(entry.switch, {})[entry.key] = entry
        self.rendered.update(new)
        flow_mods = 0
        for switch in removed.keys() | added.keys():
            table = self.tables[switch]
            # Only the changed groups' keys can differ; the job entries win a
            # clash, as in desired_overlay (TE entries are added with setdefault).
            keys = removed.get(switch, {}).keys() | added.get(switch, {}).keys()
            before = {k: table[k] for k in keys if k in table}
            for k in removed.get(switch, {}):
                if table.get(k) is removed[switch][k]:
                    del table[k]
            for k, entry in added.get(switch, {}).items():
                table.setdefault(k, entry)
            after = {k: table[k] for k in keys if k in table}
            delta = diff_table(switch, after, before)
            flow_mods += len(delta.adds) + len(delta.deletes)
        return flow_mods
