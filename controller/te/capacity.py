"""The GPU ledger and free capacity: which job holds each GPU, and what is
free per server and per pod. Pure.

Placement reads free rails for every request, so the per-server view is kept
as arrays over the fabric's servers (a bit mask of free rails each) and the
ledger is updated per job instead of rebuilt per request.
"""

from __future__ import annotations

import weakref
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from controller.fabric import Fabric, NicId
from controller.te.jobs import Drains, Job
from controller.te.load import drained
from controller.te.patterns import ServerKey


@dataclass
class Usage:
    """Which job holds each GPU, and which servers are held exclusively. A
    ledger the service updates per job instead of rebuilding per request."""

    used: dict[ServerKey, dict[int, str]] = field(default_factory=lambda: defaultdict(dict))
    exclusive: dict[ServerKey, str] = field(default_factory=dict)
    # Derived from `used`, kept in step: each server's used rails as a bit
    # mask, and GPUs held per (pod, rail) (what the allocation gauges show).
    masks: dict[ServerKey, int] = field(default_factory=dict)
    held: Counter[tuple[int, int]] = field(default_factory=Counter)

    @classmethod
    def of(cls, jobs: Iterable[Job]) -> Usage:
        usage = cls()
        for job in jobs:
            usage.add(job)
        return usage

    def add(self, job: Job) -> None:
        job_id, used, masks = job.job_id, self.used, self.masks
        for gpu in job.gpus:
            nic = gpu.nic
            key = (nic.pod, nic.server)
            used[key][nic.rail] = job_id
            masks[key] = masks.get(key, 0) | 1 << nic.rail
            self.held[(nic.pod, nic.rail)] += 1
        if job.request.exclusive:
            for key in job.server_keys():
                self.exclusive[key] = job_id

    def remove(self, job: Job) -> None:
        for gpu in job.gpus:
            nic = gpu.nic
            key = (nic.pod, nic.server)
            rails = self.used.get(key, {})
            if rails.pop(nic.rail, None) is not None:
                self.held[(nic.pod, nic.rail)] -= 1
                self.masks[key] &= ~(1 << nic.rail)
            if not rails:
                self.used.pop(key, None)
                self.masks.pop(key, None)
            if self.exclusive.get(key) == job.job_id:
                del self.exclusive[key]


class ServerTable:
    """The fabric's servers as arrays, in fabric order: what the per-request
    free-rail computation runs over. Built once per fabric."""

    def __init__(self, fabric: Fabric) -> None:
        self.keys: list[ServerKey] = [(s.pod, s.index) for s in fabric.servers]
        self.names: list[str] = [s.name for s in fabric.servers]
        self.row: dict[ServerKey, int] = {key: i for i, key in enumerate(self.keys)}
        self.pods = np.array([pod for pod, _ in self.keys], dtype=np.int64)
        self.rails = fabric.rails
        self.full = np.array([sum(1 << nic.rail for nic in s.nics) for s in fabric.servers], dtype=np.int64)
        self.pod_ids = sorted(set(self.pods.tolist()))
        # The fabric's own NicId per (rail, pod, server): placed jobs share them.
        self.nics: dict[tuple[int, int, int], NicId] = {nic: nic for nic in fabric.nics}

    def popcount(self, masks: np.ndarray) -> np.ndarray:
        count = np.zeros(len(masks), dtype=np.int64)
        for rail in range(self.rails):
            count += (masks >> rail) & 1
        return count


_TABLES: weakref.WeakKeyDictionary[Fabric, ServerTable] = weakref.WeakKeyDictionary()


def server_table(fabric: Fabric) -> ServerTable:
    table = _TABLES.get(fabric)
    if table is None:
        table = _TABLES[fabric] = ServerTable(fabric)
    return table


def used_masks(table: ServerTable, usage: Usage) -> np.ndarray:
    """Per server (table order), its used rails as a bit mask."""
    out = np.zeros(len(table.keys), dtype=np.int64)
    if usage.masks:
        rows = np.fromiter((table.row[key] for key in usage.masks), dtype=np.int64, count=len(usage.masks))
        out[rows] = np.fromiter(usage.masks.values(), dtype=np.int64, count=len(usage.masks))
    return out


def exclusive_rows(table: ServerTable, usage: Usage) -> np.ndarray:
    return np.fromiter((table.row[key] for key in usage.exclusive), dtype=np.int64, count=len(usage.exclusive))


def free_masks(fabric: Fabric, usage: Usage, drains: Drains, exclusive_request: bool = False) -> np.ndarray:
    """Per server (table order), its free and reachable rails as a bit mask
    (rail r = bit r). A server held exclusively has none, and for an exclusive
    request neither has any partly used server."""
    table = server_table(fabric)
    used = used_masks(table, usage)
    free = table.full & ~used
    free[exclusive_rows(table, usage)] = 0
    if exclusive_request:
        free[used != 0] = 0
    if drains.switches or drains.links:
        for row in np.flatnonzero(free).tolist():
            server = fabric.servers[row]
            for nic in server.nics:
                if free[row] >> nic.rail & 1 and drained(fabric, drains, [fabric.nic_egress(nic)]):
                    free[row] &= ~(1 << nic.rail)
    out: np.ndarray = free
    return out


@dataclass(frozen=True)
class ServerFree:
    name: str
    pod: int
    index: int
    gpus: int
    free_gpus: int
    free_rails: tuple[int, ...]  # the free GPUs' rails (a GPU's rail is its local rank)
    exclusive: bool  # held whole by an exclusive job: its free GPUs are not offered


@dataclass(frozen=True)
class PodFree:
    pod: int
    gpus: int
    free_gpus: int
    whole_servers_free: int  # servers with every GPU free: what a job of a server or more needs
    partly_free_servers: int  # servers with some GPUs free and some held


@dataclass(frozen=True)
class FreeCapacity:
    gpus: int
    free_gpus: int
    pods: tuple[PodFree, ...]
    servers: tuple[ServerFree, ...]  # only servers with a free GPU, unless asked for all

    @property
    def whole_servers_free(self) -> int:
        return sum(p.whole_servers_free for p in self.pods)

    @property
    def partly_free_servers(self) -> int:
        return sum(p.partly_free_servers for p in self.pods)


def free_capacity(fabric: Fabric, usage: Usage, all_servers: bool = False) -> FreeCapacity:
    """Free GPUs per server and per pod. A GPU is free when no job holds it and
    its server is not held exclusively; drains do not change what is free
    (a drained path is a routing matter, not an allocation)."""
    table = server_table(fabric)
    free = table.full & ~used_masks(table, usage)
    excl = np.zeros(len(table.keys), dtype=bool)
    excl[exclusive_rows(table, usage)] = True
    free[excl] = 0
    gpus = table.popcount(table.full)
    free_count = table.popcount(free)
    whole = (free == table.full) & (gpus > 0)
    partly = (free_count > 0) & ~whole
    n_pods = max(table.pod_ids) + 1 if table.pod_ids else 0
    per_pod = [np.bincount(table.pods, weights=w, minlength=n_pods) for w in (gpus, free_count, whole, partly)]
    pods = tuple(
        PodFree(pod, int(per_pod[0][pod]), int(per_pod[1][pod]), int(per_pod[2][pod]), int(per_pod[3][pod]))
        for pod in table.pod_ids
    )
    rows = range(len(table.keys)) if all_servers else np.flatnonzero(free_count).tolist()
    servers = tuple(
        ServerFree(
            table.names[row],
            *table.keys[row],
            int(gpus[row]),
            int(free_count[row]),
            tuple(r for r in range(table.rails) if int(free[row]) >> r & 1),
            bool(excl[row]),
        )
        for row in rows
    )
    return FreeCapacity(int(gpus.sum()), int(free_count.sum()), pods, servers)
