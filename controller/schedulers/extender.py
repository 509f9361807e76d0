"""kube-scheduler's extender protocol, answered from Railyard's view of the
fabric (pure: JSON-shaped dicts in and out).

The shapes and field names are the upstream Go types', which carry no JSON
tags, so their keys are the field names (k8s.io/kube-scheduler/extender/v1,
types.go): ExtenderArgs {Pod, Nodes, NodeNames}, ExtenderFilterResult
{Nodes, NodeNames, FailedNodes, FailedAndUnresolvableNodes, Error},
HostPriority {Host, Score}, with scores from 0 to MaxExtenderPriority (10).

A pod belongs to a Railyard job through its labels:
    railyard.io/job: <job id>
    railyard.io/job-gpus: <the job's GPUs, every pod together> (default: this pod's)
and asks for its GPUs as `nvidia.com/gpu` (GPUs on one node: rails 0..k-1,
local rank g on rail g). Pods without the job label pass through untouched.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.errors import RailyardError, Status
from controller.schedulers.hosts import HostMap

JOB_LABEL = "railyard.io/job"
JOB_GPUS_LABEL = "railyard.io/job-gpus"
GPU_RESOURCE = "nvidia.com/gpu"
MAX_PRIORITY = 10  # kube-scheduler's MaxExtenderPriority


class ExtenderError(RailyardError):
    """A request the extender cannot answer: said in the result's Error."""

    status = Status.INVALID_ARGUMENT


@dataclass(frozen=True)
class PodJob:
    job_id: str
    gpus_per_node: int
    total_gpus: int

    @property
    def nodes_needed(self) -> int:
        return math.ceil(self.total_gpus / self.gpus_per_node)

    @property
    def rails(self) -> int:
        """The rails a node must have free: 0..k-1, as a bit mask."""
        return (1 << self.gpus_per_node) - 1


@dataclass(frozen=True)
class FabricView:
    """What filter and prioritize read, taken at one intent revision."""

    free_rails: Mapping[str, int]  # server -> its free, reachable rails (bit r = rail r)
    pod_of: Mapping[str, int]  # server -> pod
    uplink_utilization: Mapping[int, float]  # pod -> its uplinks' predicted load / capacity
    job_servers: frozenset[str] | None  # the job's servers, when Railyard has placed it already


def pod_job(pod: Any, rails: int, fabric_gpus: int) -> PodJob | None:
    """The Railyard job a pod (a Kubernetes Pod object) belongs to; None if
    it names none. A pod asks for at most `rails` GPUs (one per rail of a
    server: what rail-aligned means), a job for at most `fabric_gpus`."""
    if not isinstance(pod, dict):
        raise ExtenderError("Pod: expected an object")
    metadata = _object(pod.get("metadata"), "Pod.metadata")
    labels = {
        **_object(metadata.get("annotations"), "Pod.metadata.annotations"),
        **_object(metadata.get("labels"), "Pod.metadata.labels"),
    }
    job_id = labels.get(JOB_LABEL)
    if not job_id:
        return None
    gpus = 0
    containers = _object(pod.get("spec"), "Pod.spec").get("containers") or []
    if not isinstance(containers, list):
        raise ExtenderError("Pod.spec.containers: expected a list")
    for container in containers:
        container = _object(container, "Pod.spec.containers[]")
        resources = _object(container.get("resources"), "a container's resources")
        limits = _object(resources.get("limits"), "resources.limits")
        value = limits.get(GPU_RESOURCE, _object(resources.get("requests"), "resources.requests").get(GPU_RESOURCE))
        if value is not None:
            gpus += _count(value, f"{GPU_RESOURCE} of container {container.get('name', '?')}")
    if gpus < 1:
        raise ExtenderError(f"pod of job {job_id!r} asks for no {GPU_RESOURCE}: nothing to place rail-aligned")
    if gpus > rails:
        raise ExtenderError(
            f"pod of job {job_id!r} asks for {gpus} {GPU_RESOURCE} on one node; a server of this fabric has "
            f"{rails} rails, so at most {rails} GPUs rail-aligned"
        )
    total = _count(labels.get(JOB_GPUS_LABEL, gpus), JOB_GPUS_LABEL)
    if total < gpus:
        raise ExtenderError(f"{JOB_GPUS_LABEL} is {total}, fewer than this pod's {gpus} GPUs")
    if total > fabric_gpus:
        raise ExtenderError(f"{JOB_GPUS_LABEL} is {total}; the fabric has {fabric_gpus} GPUs")
    return PodJob(str(job_id)[:63], gpus, total)


def _object(value: Any, what: str) -> dict[str, Any]:
    """`value` when it is a JSON object (None: an empty one); else ExtenderError naming `what`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ExtenderError(f"{what}: expected an object")
    return value


def _count(value: Any, what: str) -> int:
    text = str(value)
    if len(text) > 12:
        raise ExtenderError(f"{what}: {text[:32]!r} is out of range")
    try:
        count = int(text)
    except ValueError:
        raise ExtenderError(f"{what}: {str(value)[:32]!r} is not a whole number of GPUs") from None
    if not 0 <= count <= 1_000_000:
        raise ExtenderError(f"{what}: {count} is out of range")
    return count


MAX_DEPTH = 400  # of nesting: kube-scheduler's objects go a few dozen deep
_STRUCTURE = re.compile(rb'\\.|["\[\]{}]')


def check_depth(body: bytes, limit: int = MAX_DEPTH) -> None:
    """ExtenderError if the JSON text `body` nests deeper than `limit` (a
    parser would recurse once per level: 100k nested '[' once ended as an
    HTTP 500). Looks only at quotes, escapes and brackets."""
    depth, in_string = 0, False
    for match in _STRUCTURE.finditer(body):
        token = match.group()
        if token == b'"':
            in_string = not in_string
        elif in_string or token[:1] == b"\\":
            continue
        elif token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                raise ExtenderError(f"the request nests deeper than {limit} levels")
        else:
            depth -= 1


def candidate_nodes(args: Any) -> tuple[list[str], dict[str, dict[str, Any]] | None]:
    """The node names of ExtenderArgs, and the Node objects by name when it
    sent them (Nodes, without nodeCacheCapable): the result must then carry
    Nodes too, as kube-scheduler reads only that field."""
    if not isinstance(args, dict):
        raise ExtenderError("ExtenderArgs: expected an object")
    names, objects = args.get("NodeNames"), None
    if names is None and isinstance(args.get("Nodes"), dict):
        items = args["Nodes"].get("items") or []
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise ExtenderError("ExtenderArgs: Nodes.items must list Node objects")
        names = [_object(item.get("metadata"), "a Node's metadata").get("name") for item in items]
        objects = dict(zip(names, items))
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ExtenderError("ExtenderArgs: NodeNames (or Nodes.items[].metadata.name) must list node names")
    return names, objects


def filter_result(passing: list[str], objects: dict[str, dict[str, Any]] | None, **fields: Any) -> dict[str, Any]:
    """ExtenderFilterResult with the passing nodes where kube-scheduler will
    look for them: NodeNames, or Nodes when it sent Node objects."""
    result = {"NodeNames": passing, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": "", **fields}
    if objects is not None:
        result["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "items": [objects[n] for n in passing]}
        result["NodeNames"] = None
    return result


def filter_nodes(
    view: FabricView,
    hosts: HostMap,
    job: PodJob | None,
    nodes: list[str],
    objects: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """ExtenderFilterResult: the nodes the pod's job can use rail-aligned."""
    if job is None:
        return filter_result(nodes, objects)
    passing, failed, unresolvable = [], {}, {}
    for node in nodes:
        server = hosts.resolve(node)
        if server not in view.pod_of:
            unresolvable[node] = "not a server of the Railyard fabric"
        elif view.job_servers is not None:
            if server in view.job_servers:
                passing.append(node)
            else:
                unresolvable[node] = f"job {job.job_id} is placed on other nodes"
        elif view.free_rails.get(server, 0) & job.rails == job.rails:
            passing.append(node)
        else:
            free = [r for r in range(job.gpus_per_node) if view.free_rails.get(server, 0) >> r & 1]
            failed[node] = f"needs rails 0-{job.gpus_per_node - 1} free and reachable; free: {free or 'none'}"
    return filter_result(passing, objects, FailedNodes=failed, FailedAndUnresolvableNodes=unresolvable)


def prioritize(view: FabricView, hosts: HostMap, job: PodJob | None, nodes: list[str]) -> list[dict[str, Any]]:
    """HostPriorityList. A placed job's own nodes score 10, others 0. Else a
    node scores for its pod: 60% for how much of the job the pod can hold
    rail-aligned (a job inside one pod sends nothing over the spines), 40%
    for the headroom on the pod's uplinks."""
    if job is None:
        return [{"Host": node, "Score": 0} for node in nodes]
    if view.job_servers is not None:
        return [{"Host": n, "Score": MAX_PRIORITY if hosts.resolve(n) in view.job_servers else 0} for n in nodes]
    eligible: dict[int, int] = {}
    for server, rails in view.free_rails.items():
        if rails & job.rails == job.rails:
            eligible[view.pod_of[server]] = eligible.get(view.pod_of[server], 0) + 1
    out = []
    for node in nodes:
        node_pod = view.pod_of.get(hosts.resolve(node))
        if node_pod is None:
            out.append({"Host": node, "Score": 0})
            continue
        fit = min(1.0, eligible.get(node_pod, 0) / job.nodes_needed)
        headroom = 1.0 - min(1.0, max(0.0, view.uplink_utilization.get(node_pod, 0.0)))
        out.append({"Host": node, "Score": round(MAX_PRIORITY * (0.6 * fit + 0.4 * headroom))})
    return out
