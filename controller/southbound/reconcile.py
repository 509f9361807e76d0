"""Reconciliation, the pure half: installed vs desired -> the difference.

The switch's own table is the truth about what is installed; the desired
overlay is derived from intent. Only the difference is sent, so a restarted
controller facing correct tables sends nothing.

Ordering across switches is make-before-break: additions go to switches
furthest from the ingress first (spine/core, then agg, then leaf), so a leaf
never steers onto a path whose downstream entries are not there yet;
deletions go the other way round, ingress first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from controller.fabric import Fabric
from controller.southbound.overlay import EntryKey, Match, OverlayEntry, OverlayMeter

Table = Mapping[EntryKey, OverlayEntry]


class FlowModKind(StrEnum):
    """What one bundle does: a pass commits a switch's additions and its
    deletions in separate bundles (make-before-break). The value is the
    flow-mod metric's label."""

    ADD = "add"
    DELETE = "delete"


@dataclass(frozen=True)
class SwitchDelta:
    switch: str
    adds: tuple[OverlayEntry, ...] = ()  # new keys, or existing keys whose actions/cookie differ
    deletes: tuple[OverlayEntry, ...] = ()  # installed Railyard entries nobody wants

    @property
    def empty(self) -> bool:
        return not self.adds and not self.deletes


def diff_table(switch: str, desired: Table, installed: Table) -> SwitchDelta:
    """In key order (a bundle's order is deterministic); only the difference is sorted."""
    adds = sorted((e for k, e in desired.items() if installed.get(k) != e), key=_by_key)
    deletes = sorted((e for k, e in installed.items() if k not in desired), key=_by_key)
    return SwitchDelta(switch, tuple(adds), tuple(deletes))


def _by_key(entry: OverlayEntry) -> tuple[int, Match]:
    return entry.priority, entry.match


@dataclass(frozen=True)
class MeterDelta:
    adds: tuple[OverlayMeter, ...] = ()
    changes: tuple[OverlayMeter, ...] = ()  # installed with another rate or burst
    deletes: tuple[OverlayMeter, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.adds and not self.changes and not self.deletes


def diff_meters(desired: Mapping[int, OverlayMeter], installed: Mapping[int, OverlayMeter]) -> MeterDelta:
    return MeterDelta(
        tuple(m for i, m in sorted(desired.items()) if i not in installed),
        tuple(m for i, m in sorted(desired.items()) if i in installed and installed[i] != m),
        tuple(m for i, m in sorted(installed.items()) if i not in desired),
    )


def apply_delta(table: dict[EntryKey, OverlayEntry], delta: SwitchDelta) -> None:
    """Makes `table` what the switch holds after the delta. An OpenFlow add with
    an existing (priority, match) replaces that entry: adds are assignments."""
    for entry in delta.deletes:
        table.pop(entry.key, None)
    for entry in delta.adds:
        table[entry.key] = entry


def order_for_adds(fabric: Fabric, switches: Iterable[str]) -> list[str]:
    # Distance from the ingress leaf, furthest first: the highest tier first.
    return sorted(switches, key=lambda s: (-fabric.switch(s).tier.level, s))


def order_for_deletes(fabric: Fabric, switches: Iterable[str]) -> list[str]:
    return sorted(switches, key=lambda s: (fabric.switch(s).tier.level, s))


def tiers(fabric: Fabric, ordered: list[str]) -> list[list[str]]:
    """Switches in make-before-break order, grouped by tier: one group's
    bundles may be in flight together, the next group waits for them."""
    groups: list[list[str]] = []
    for name in ordered:
        if not groups or fabric.switch(groups[-1][0]).tier is not fabric.switch(name).tier:
            groups.append([])
        groups[-1].append(name)
    return groups


def changes(deltas: Mapping[str, SwitchDelta], meters: Mapping[str, MeterDelta], most: int = 8) -> tuple[int, str]:
    """How many switches a pass changes, and what, for one log line: the
    first `most` by name (a TE cycle may touch hundreds of leaves)."""
    changed = sorted(n for n in deltas if not deltas[n].empty or not meters[n].empty)
    parts = []
    for name in changed[:most]:
        part = f"{name} +{len(deltas[name].adds)} -{len(deltas[name].deletes)}"
        if not meters[name].empty:
            meter = meters[name]
            part += f" meters +{len(meter.adds)} ~{len(meter.changes)} -{len(meter.deletes)}"
        parts.append(part)
    more = f" and {len(changed) - most} more" if len(changed) > most else ""
    return len(changed), ", ".join(parts) + more
