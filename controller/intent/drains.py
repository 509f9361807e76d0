"""Draining a link or switch: what must move, and whether it can. Pure.

A drain is refused (Conflict -> FAILED_PRECONDITION) when it would leave
something without a path: a job GPU whose only link is drained, a job flow
with no undrained spine left, or an operator pin that names the element (the
operator moves or removes the pin first; Railyard does not override it).
Otherwise the affected job flows are re-placed min-max on what remains.
"""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum

from controller.errors import Conflict, FieldError, NotFound, shown
from controller.fabric import Endpoint, Fabric, FabricError, Tier
from controller.fabric import addressing as ad
from controller.intent.model import Intent, RecordKind, directions
from controller.te.jobs import Drains, Job
from controller.te.load import drained, flow_path, jobs_load, link_name
from controller.te.paths import NoPath, assign_greedy


class DrainError(FieldError):
    context = "drain"


class DrainTarget(StrEnum):
    """What a drain takes out of service. The value is the CLI's word for it."""

    SWITCH = "switch"
    LINK = "link"

    @property
    def record(self) -> RecordKind:
        return RecordKind.DRAINED_SWITCH if self is DrainTarget.SWITCH else RecordKind.DRAINED_LINK

    def resolve(self, fabric: Fabric, name: str) -> str:
        """The target's canonical name (a link by either end); NotFound or DrainError if there is none."""
        return resolve_switch(fabric, name) if self is DrainTarget.SWITCH else resolve_link(fabric, name)

    def drained(self, drains: Drains) -> frozenset[str]:
        return drains.switches if self is DrainTarget.SWITCH else drains.links

    def with_drained(self, drains: Drains, names: frozenset[str]) -> Drains:
        """`drains` with this kind's drained set replaced by `names`."""
        if self is DrainTarget.SWITCH:
            return replace(drains, switches=names)
        return replace(drains, links=names)


def resolve_link(fabric: Fabric, name: str) -> str:
    """'switch:port' naming either end of a link -> the link's canonical name."""
    node, _, port = name.rpartition(":")
    if not node or not port.isdigit():
        raise DrainError("link", f"{name!r} is not SWITCH:PORT", "e.g. ryl0r0:3 (see `railyard links`)")
    try:
        link = fabric.ports(node)[int(port)]
    except (FabricError, KeyError):  # no such switch, or no such port on it
        raise NotFound(f"no link at {shown(name)} in fabric {fabric.spec.name!r}") from None
    return link_name(fabric, link)


def resolve_switch(fabric: Fabric, name: str) -> str:
    if name not in fabric.switches:
        raise NotFound(f"no switch {shown(name)} in fabric {fabric.spec.name!r}")
    return name


def rerouted_jobs(fabric: Fabric, intent: Intent, drains: Drains) -> dict[str, Job]:
    """Jobs whose flows had to move under `drains`, with their new flows."""
    check_keeps_paths(fabric, intent.drains, drains)
    for pin in intent.pins.values():
        for match in directions(pin):
            hit = drained(fabric, drains, fabric.egress_path(match.src, match.dst, pin.spine))
            if hit:
                raise Conflict(f"pin {pin.name!r} steers {match.describe()} across {hit}; unpin or move it first")
    moved: dict[str, Job] = {}
    for job_id, job in sorted(intent.jobs.items()):
        for gpu in job.gpus:
            hit = drained(fabric, drains, [Endpoint(ad.nic_name(gpu.nic), 0)])
            if hit:
                raise Conflict(
                    f"job {job_id!r} has GPU rank {gpu.rank} ({ad.nic_address(gpu.nic)}) behind {hit}; "
                    "release the job first"
                )
        stuck = [i for i, f in enumerate(job.flows) if drained(fabric, drains, flow_path(fabric, f))]
        if not stuck:
            continue
        others = {jid: j for jid, j in intent.jobs.items() if jid != job_id} | moved
        base = jobs_load(fabric, others.values())
        keep = [f for i, f in enumerate(job.flows) if i not in stuck]
        for flow in keep:
            for egress in flow_path(fabric, flow):
                base[egress] += flow.demand_bps
        try:
            new, _ = assign_greedy(fabric, drains, base, [job.flows[i] for i in stuck])
        except NoPath as exc:
            raise Conflict(
                f"job {job_id!r}: {ad.nic_address(exc.flow.src)} -> {ad.nic_address(exc.flow.dst)} "
                f"would have no path: {exc}"
            ) from None
        flows = list(job.flows)
        for i, flow in zip(stuck, new):
            flows[i] = flow
        moved[job_id] = replace(job, flows=tuple(flows))
    return moved


def _leaf_components(fabric: Fabric, drains: Drains) -> int:
    """Connected groups of leaves over undrained switches and links."""
    import networkx as nx  # only drains need a graph: the fabric routes by formula

    graph = nx.Graph()
    for switch in fabric.switches:
        if switch not in drains.switches:
            graph.add_node(switch)
    for link in fabric.links:
        if link.is_access or link.a.node not in graph or link.b.node not in graph:
            continue
        if link_name(fabric, link) not in drains.links:
            graph.add_edge(link.a.node, link.b.node)
    leaves = {s.name for s in fabric.switches_in(Tier.LEAF)} - drains.switches
    return sum(1 for component in nx.connected_components(graph) if component & leaves)


def check_keeps_paths(fabric: Fabric, before: Drains, after: Drains) -> None:
    """Refuses a drain that splits leaves that could still reach each other."""
    if _leaf_components(fabric, after) > _leaf_components(fabric, before):
        raise Conflict("that would drain the last path between some leaves; undrain another element first")
