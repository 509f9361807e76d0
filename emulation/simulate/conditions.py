"""The fabric's condition over a run: which links are dead and what the
operator has drained, from the workload's events. Pure.

A dead switch kills every one of its links (both directions). A drain is a
controller action (the intent API's Drains): the capacity is still there,
only Railyard avoids it, so the arms without a controller ignore it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from controller.fabric import Fabric
from controller.te.jobs import Drains
from emulation.simulate.traffic import SimFlow
from emulation.workload.model import Event


@dataclass(frozen=True)
class Condition:
    """From `start_s` until the next condition."""

    start_s: float
    dead: tuple[str, ...] = ()  # links named "switch:port" (either end)
    drains: Drains = field(default_factory=Drains)


def switch_links(fabric: Fabric, switch: str) -> list[str]:
    return [f"{switch}:{port}" for port in sorted(fabric.ports(switch))]


def conditions(fabric: Fabric, events: Sequence[Event]) -> list[Condition]:
    """One condition from 0, and a new one at each event (events are sorted and checked)."""
    links: set[str] = set()
    switches: set[str] = set()
    drained_links: set[str] = set()
    drained_switches: set[str] = set()
    out = [Condition(0.0)]
    for event in events:
        target, kind = event.target, event.kind
        if kind in ("link_down", "link_up"):
            (links.add if kind == "link_down" else links.discard)(target)
        elif kind in ("switch_down", "switch_up"):
            (switches.add if kind == "switch_down" else switches.discard)(target)
        else:
            chosen = drained_links if event.on_link else drained_switches
            (chosen.add if kind == "drain" else chosen.discard)(target)
        dead = set(links)
        for switch in switches:
            dead.update(switch_links(fabric, switch))
        condition = Condition(
            event.at_s, tuple(sorted(dead)), Drains(frozenset(drained_switches), frozenset(drained_links))
        )
        if out[-1].start_s == event.at_s:
            out[-1] = condition
        else:
            out.append(condition)
    return out


def at(conditions_: Sequence[Condition], t: float) -> int:
    """The index of the condition in force at t."""
    index = 0
    for i, c in enumerate(conditions_):
        if c.start_s <= t + 1e-9:
            index = i
    return index


@dataclass(frozen=True)
class Phase:
    """A stretch of the run with the same unbounded flows sending and the same links dead."""

    start_s: float
    dead: tuple[str, ...]
    started: np.ndarray  # per flow: sending in this phase


def phases_of(flows: Sequence[SimFlow], conditions_: Sequence[Condition], duration_s: float) -> list[Phase]:
    """Boundaries at every unbounded flow's start and stop and every change of dead links."""
    starts = np.fromiter((f.start_s for f in flows), dtype=float, count=len(flows))
    stops = np.fromiter((f.window.stop(duration_s) for f in flows), dtype=float, count=len(flows))
    times = sorted({0.0, *starts.tolist(), *(s for s in stops.tolist() if s < duration_s)})
    times = sorted({*times, *(c.start_s for c in conditions_)})
    out: list[Phase] = []
    for t in times:
        dead = conditions_[at(conditions_, t)].dead
        started = (starts <= t + 1e-12) & (stops > t + 1e-12)
        if out and out[-1].dead == dead and np.array_equal(out[-1].started, started):
            continue
        out.append(Phase(t, dead, started))
    return out
