"""The arms compared on a workload that iterates, and the baselines' runs.
Pure.

- `first-fit+ecmp`: network-blind first-fit placement, flows hashed;
- `topology+ecmp`: topology-aware packing (Slurm topology/tree, Kueue TAS),
  blind to load, flows hashed;
- `railyard+ecmp`: Railyard's placement (its servers and QP source ports)
  with no controller to steer it: every flow hashed, each QP on its own
  (E-ECMP), as the emulated ECMP run is;
- `spray`: Railyard's placement with every flow sprayed ideally over its paths;
- `railyard+te`: Railyard's placement and the closed loop with the real engine;
- `optimum`: each job alone on the live fabric, split over every path
  (jobbound.py), the bound no arm may beat.

A workload without jobs has one placement: `ecmp`, `spray` and `railyard+te`.

The baselines have no controller: their routing changes only where the
fabric does (an event), so they run stretch by stretch between events,
and ignore drains (a drain is a controller's action).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from emulation.model.sharing import Sharing
from emulation.simulate.conditions import Condition
from emulation.simulate.prepared import Prepared, Routing, ecmp_routing, spray_routing
from emulation.simulate.timeline import Timeline
from emulation.simulate.traffic import FIRST_FIT, RAILYARD, TOPOLOGY

FIRST_FIT_ECMP, TOPOLOGY_ECMP, RAILYARD_ECMP, ECMP, SPRAY, RAILYARD_TE, OPTIMUM = (
    "first-fit+ecmp",
    "topology+ecmp",
    "railyard+ecmp",
    "ecmp",
    "spray",
    "railyard+te",
    "optimum",
)
ARMS = (FIRST_FIT_ECMP, TOPOLOGY_ECMP, RAILYARD_ECMP, SPRAY, RAILYARD_TE, OPTIMUM)
RULES = {
    FIRST_FIT_ECMP: "first-fit placement, network-blind; the underlay's 5-tuple hash",
    TOPOLOGY_ECMP: "topology-aware packing (fewest leaves, best fit, lowest index; blind to load); the hash",
    RAILYARD_ECMP: "Railyard's placement, nothing steered: the hash, each QP on its own (E-ECMP)",
    ECMP: "the underlay's 5-tuple hash",
    SPRAY: "Railyard's placement; every flow sprayed evenly over its live paths",
    RAILYARD_TE: "Railyard's placement (controller.te.placement.place) and the closed loop with the real engine",
    OPTIMUM: "each job alone on the live fabric, split over every path",
}

PLACEMENT_OF = {
    FIRST_FIT_ECMP: FIRST_FIT,
    TOPOLOGY_ECMP: TOPOLOGY,
    RAILYARD_ECMP: RAILYARD,
    ECMP: RAILYARD,
    SPRAY: RAILYARD,
    RAILYARD_TE: RAILYARD,
}

RoutingOf = Callable[[Prepared, Condition, Sharing], Routing]


def run_static(
    prep: Prepared,
    conditions: Sequence[Condition],
    duration_s: float,
    resolve_s: float,
    routing_of: RoutingOf,
    sharing: Sharing,
) -> Timeline:
    timeline = Timeline(prep.arm.flows, prep.arm.jobs, duration_s, resolve_s)
    ends = [c.start_s for c in conditions[1:]] + [duration_s]
    routing: Routing | None = None
    for i, (condition, end) in enumerate(zip(conditions, ends)):
        if routing is None or condition.dead != conditions[i - 1].dead:
            routing = routing_of(prep, condition, sharing)
        timeline.advance(end, routing)
    return timeline


def baselines(
    preps: dict[str, Prepared], conditions: Sequence[Condition], duration_s: float, resolve_s: float, sharing: Sharing
) -> dict[str, Timeline]:
    """Each baseline arm's run, by arm name."""
    hashed = {ECMP: preps[RAILYARD]}
    if FIRST_FIT in preps:
        hashed = {
            FIRST_FIT_ECMP: preps[FIRST_FIT],
            TOPOLOGY_ECMP: preps[TOPOLOGY],
            RAILYARD_ECMP: unsteered(preps[RAILYARD]),
        }
    out = {
        name: run_static(prep, conditions, duration_s, resolve_s, ecmp_routing, sharing)
        for name, prep in hashed.items()
    }
    out[SPRAY] = run_static(preps[RAILYARD], conditions, duration_s, resolve_s, spray_routing, sharing)
    return out


def unsteered(prep: Prepared) -> Prepared:
    """The same flows (so the same 5-tuples and hashes) with no job steering
    them: what the switches do with no controller to install its entries."""
    flows = tuple(replace(f, via="") for f in prep.arm.flows)
    return Prepared(replace(prep.arm, flows=flows), prep.routes, prep.hashes, prep.acks, prep.wire)
