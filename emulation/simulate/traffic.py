"""A workload on a fabric -> the plans the simulator's arms run. Pure.

`emulation.workload.expand` turns the workload into concrete transfers
(5-tuples, bytes, windows) and job iteration plans; what differs between
arms is only where a job mix goes (placers.py):

- `first-fit`: network-blind first-fit, every flow hashed by the underlay;
- `topology`: topology-aware packing, blind to load, hashed;
- `railyard`: the real placement; its flows carry their job's spine.

A workload without jobs has one plan, shared. The same seed gives the same
5-tuples, hence the same hash input, as an emulated scenario.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from controller.fabric import Fabric, NicId
from controller.te.jobs import Job
from controller.te.view import FlowKey
from emulation.simulate import placers
from emulation.workload import Workload
from emulation.workload.events import check_events
from emulation.workload.expand import JobPlan, Plan, Transfer, expand
from emulation.workload.model import JobItem, JobMixItem, Window
from emulation.workload.placers import railyard_placer

FIRST_FIT, TOPOLOGY, RAILYARD = "first-fit", "topology", "railyard"


@dataclass(frozen=True)
class SimFlow:
    """A transfer as the fluid model runs it."""

    key: FlowKey
    src: NicId
    dst: NicId
    demand_bps: float  # inf: elastic (TCP)
    window: Window = field(default_factory=Window)
    bytes: int = 0  # per burst (per iteration, for a job); 0: unbounded
    job: str = ""
    via: str = ""  # the spine a placed job steers it across; "": the underlay hashes it

    @property
    def start_s(self) -> float:
        return self.window.start_s

    @property
    def unbounded(self) -> bool:
        """Sends from its start to its stop, no byte count, no off periods: judged by goodput."""
        return not self.bytes and not self.window.on_s


def sim_flow(t: Transfer) -> SimFlow:
    return SimFlow(t.key, t.src, t.dst, t.rate_bps, t.window, t.bytes, t.job, t.via)


@dataclass(frozen=True)
class Arm:
    """One placement of the workload: its flows, the jobs' iteration plans and,
    for Railyard's, the placed jobs (the intent the controller holds)."""

    placement: str
    flows: tuple[SimFlow, ...]
    jobs: tuple[JobPlan, ...] = ()
    intent_jobs: Mapping[str, Job] = field(default_factory=dict)
    gpus_used: int = 0
    refused: int = 0  # job requests that did not fit

    @property
    def iterating(self) -> bool:
        """Some flow has a byte count or an on/off window: judged by completion
        times (iterations, bursts) rather than by goodput."""
        return any(not f.unbounded for f in self.flows)


def arm_of(name: str, plan: Plan, intent_jobs: Mapping[str, Job] | None = None) -> Arm:
    return Arm(
        name,
        tuple(sim_flow(t) for t in plan.transfers),
        tuple(j for j in plan.jobs if j.transfers),  # a one-server job talks over NVLink, not the fabric
        dict(intent_jobs or {}),
        plan.gpus_used,
        len(plan.refused),
    )


def has_jobs(workload: Workload) -> bool:
    return any(isinstance(item, JobItem | JobMixItem) for item in workload.traffic)


def build_arms(fabric: Fabric, workload: Workload, seed: int) -> tuple[Workload, dict[str, Arm]]:
    """The workload with its events checked against the fabric, and its arms by
    placement: all three for a workload with jobs, else one (`railyard`, the
    plan everything runs on)."""
    workload = check_events(workload, fabric)
    placed: dict[str, Job] = {}
    chosen = arm_of(RAILYARD, expand(fabric, workload, seed, railyard_placer(fabric, placed)), placed)
    if not has_jobs(workload):
        return workload, {RAILYARD: chosen}
    return workload, {
        FIRST_FIT: arm_of(FIRST_FIT, expand(fabric, workload, seed, placers.first_fit(fabric))),
        TOPOLOGY: arm_of(TOPOLOGY, expand(fabric, workload, seed, placers.topology(fabric))),
        RAILYARD: chosen,
    }


def demands(flows: Sequence[SimFlow]) -> np.ndarray:
    return np.fromiter((f.demand_bps for f in flows), dtype=float, count=len(flows))
