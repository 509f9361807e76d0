"""A workload's events: parsed (`parse_events`: the field named in every
refusal), then checked against a fabric before anything is built:
every link is an uplink of this fabric, named by its lower end
("leaf:port"), and every switch exists. Refusals name the field and list
what there is."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from controller.errors import valid_name
from controller.fabric import Fabric, FabricSpec, Kind, PlaneMode
from controller.fabric import addressing as ad
from controller.fabric.model import FabricError
from emulation.workload.model import EVENT_KINDS, Event, Workload, WorkloadError
from emulation.workload.values import kind_of, number, only

_EVENT_FORMS = "{at_s: SECONDS, KIND: TARGET}, KIND one of " + ", ".join(EVENT_KINDS)
LINK_FORMS = "SWITCH:PORT (an uplink, at its lower end) or {leaf: LEAF, spine: SPINE}"


def _link(value: Any, where: str) -> str:
    """A link as "switch:port", or "leaf->spine" until a fabric is known."""
    if isinstance(value, Mapping):
        if set(value) != {"leaf", "spine"} or not all(isinstance(v, str) and v for v in value.values()):
            raise WorkloadError(where, f"got {value!r}", LINK_FORMS)
        return f"{value['leaf']}->{value['spine']}"
    switch, _, port = str(value).rpartition(":")
    if not isinstance(value, str) or not switch or not (port.isascii() and port.isdigit()):
        raise WorkloadError(where, f"got {value!r}", LINK_FORMS)
    return value


def parse_events(value: Any, duration: float) -> tuple[Event, ...]:
    if not isinstance(value, list):
        raise WorkloadError("events", f"must be a list, got {kind_of(value)}", "[" + _EVENT_FORMS + "]")
    out: list[Event] = []
    for i, event in enumerate(value):
        where = f"events[{i}]"
        kinds = [k for k in EVENT_KINDS if isinstance(event, Mapping) and k in event]
        if not isinstance(event, Mapping) or len(kinds) != 1:
            raise WorkloadError(where, f"got {event!r}", _EVENT_FORMS)
        only(event, f"{where}.", {"at_s", kinds[0]})
        at = number(event, "at_s", lower=0.0, upper=duration, prefix=f"{where}.")
        if at >= duration:
            raise WorkloadError(f"{where}.at_s", f"got {at:g}", f"less than duration_s ({duration:g}): inside the run")
        kind, target = kinds[0], event[kinds[0]]
        on_link = kind.startswith("link_") or (
            kind in ("drain", "undrain") and (isinstance(target, Mapping) or ":" in str(target))
        )
        if on_link:
            target = _link(target, f"{where}.{kind}")
        elif not isinstance(target, str) or not valid_name(target):
            allowed = "a switch name" + (", or a link: " + LINK_FORMS if "drain" in kind else "")
            raise WorkloadError(f"{where}.{kind}", f"got {target!r}", allowed)
        out.append(Event(at, kind, target, i))
    events = tuple(sorted(out, key=lambda e: e.at_s))
    # Links only once a fabric gives them one name each (events.check_events): either end names one.
    check_timeline(tuple(e for e in events if not e.on_link))
    return events


_UNDOES = {"link_up": "link_down", "switch_up": "switch_down", "undrain": "drain"}


def check_timeline(events: tuple[Event, ...]) -> None:
    """In time order, an up follows a down of the same thing, and nothing goes
    down twice."""
    down: set[tuple[str, str]] = set()
    for event in events:
        undone = _UNDOES.get(event.kind)
        if undone is not None:
            if (undone, event.target) not in down:
                raise WorkloadError(
                    event.field, f"{event.target} has no {undone} before {event.at_s:g} s", f"a {undone} of it first"
                )
            down.discard((undone, event.target))
        elif (event.kind, event.target) in down:
            redo = next(k for k, v in _UNDOES.items() if v == event.kind)
            raise WorkloadError(event.field, f"{event.target} already had a {event.kind}", f"a {redo} of it first")
        else:
            down.add((event.kind, event.target))


def spec_uplinks(spec: FabricSpec) -> dict[str, str]:
    """Every uplink a spec's fabric has, "switch:port" at its lower end -> the
    switch above, by the builders' port numbering (controller/fabric/builders.py;
    a unit test holds the two together). No fabric is built."""
    out: dict[str, str] = {}
    if spec.kind is Kind.RAIL_OPTIMIZED:
        for pod in range(spec.pods):
            for rail in range(spec.rails):
                leaf = ad.leaf_name(pod, rail)
                for j in range(spec.spines):
                    if spec.core is not None:
                        spine = ad.cluster_spine_name(spec.cluster_of(pod), j)
                    else:
                        spine = ad.spine_name(j, plane=rail if spec.plane_mode is PlaneMode.PER_RAIL else None)
                    out[f"{leaf}:{spec.servers_per_pod + 1 + j}"] = spine
        if spec.core is not None:
            per_plane = spec.core.switches // spec.spines
            for cluster in range(spec.clusters):
                for j in range(spec.spines):
                    for i in range(per_plane):
                        port = spec.pods_per_cluster * spec.rails + 1 + i
                        out[f"{ad.cluster_spine_name(cluster, j)}:{port}"] = ad.core_name(j * per_plane + i)
    elif spec.kind is Kind.FAT_TREE:
        half = spec.k // 2
        for pod in range(spec.k):
            for a in range(half):
                for e in range(half):
                    out[f"{ad.edge_name(pod, e)}:{half + 1 + a}"] = ad.agg_name(pod, a)
                for i in range(half):
                    out[f"{ad.agg_name(pod, a)}:{half + 1 + i}"] = ad.spine_name(a * half + i)
    return out


def check_events(workload: Workload, fabric: Fabric) -> Workload:
    """The workload with every link event's target as its lower end's
    "switch:port" (either end, or "leaf->spine", is accepted)."""
    uplinks = spec_uplinks(fabric.spec)
    by_ends = {(name.rpartition(":")[0], above): name for name, above in uplinks.items()}
    events = []
    for event in workload.events:
        if event.on_link:
            events.append(replace(event, target=_uplink(fabric, uplinks, by_ends, event.target, event.field)))
        elif event.target not in fabric.switches:
            raise WorkloadError(
                event.field, f"no switch {event.target!r} in {fabric.spec.name!r}", _listed(sorted(fabric.switches))
            )
        else:
            events.append(event)
    check_timeline(tuple(events))  # now that each link has one name, whichever end the file used
    return replace(workload, events=tuple(events))


def _uplink(
    fabric: Fabric, uplinks: dict[str, str], by_ends: dict[tuple[str, str], str], target: str, where: str
) -> str:
    if "->" in target:
        low, _, high = target.partition("->")
        name = by_ends.get((low, high))
        if name is not None:
            return name
        leaves = sorted({n.rpartition(":")[0] for n in uplinks})
        if low not in leaves:
            raise WorkloadError(f"{where}.leaf", f"no uplinks on {low!r} in {fabric.spec.name!r}", _listed(leaves))
        above = sorted(a for (lower, a) in by_ends if lower == low)
        raise WorkloadError(f"{where}.spine", f"{low} has no uplink to {high!r}", ", ".join(above))
    if target in uplinks:
        return target
    switch, _, port = target.rpartition(":")
    try:
        link = fabric.ports(switch).get(int(port))
    except (FabricError, KeyError, ValueError):
        link = None
    if link is not None and not link.is_access:
        lower = link.peer(switch)
        if f"{lower.node}:{lower.port}" in uplinks:
            return f"{lower.node}:{lower.port}"
    raise WorkloadError(where, f"{target} is not an uplink of {fabric.spec.name!r}", _listed_uplinks(uplinks, switch))


def _listed(names: list[str], first: int = 12) -> str:
    more = f", ... ({len(names)} in all)" if len(names) > first else ""
    return ", ".join(names[:first]) + more if names else "none"


def _listed_uplinks(uplinks: dict[str, str], near: str, first: int = 12) -> str:
    """The uplinks, the named switch's own first; the first dozen of a big fabric."""
    if not uplinks:
        return "none (this fabric has no uplinks)"
    ordered = sorted(uplinks.items(), key=lambda kv: kv[0].rpartition(":")[0] != near)
    shown = [f"{name} (to {above})" for name, above in ordered[:first]]
    more = f", ... ({len(uplinks)} uplinks in all)" if len(uplinks) > first else ""
    return ", ".join(shown) + more
