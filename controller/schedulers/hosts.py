"""Host names: each server of the fabric as the scheduler knows it.

A host map file names the servers (every other one keeps its Railyard name,
`ryh<pod>s<server>`), and may name each server's NICs, one per rail:

    hosts:
      ryh0s0: gpu-a001
      ryh0s1: {node: gpu-a002, nics: [ens1f0, ens2f0]}

Node names follow Kubernetes' (RFC 1123 subdomains): Slurm and
kube-scheduler both take them as they are.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.errors import FieldError
from controller.fabric import Fabric
from controller.yamldoc import read_yaml

NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*")
NODE_NAME_RULE = "a lowercase RFC 1123 name of 1-253 characters (a-z, 0-9, '-', '.'), as Kubernetes node names"
NIC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}")


class HostsError(FieldError):
    context = "hosts"


@dataclass(frozen=True)
class HostMap:
    nodes: Mapping[str, str]  # server -> scheduler node name, for every server of the fabric
    nics: Mapping[str, tuple[str, ...]]  # server -> NIC names by rail, where the map names them

    def node(self, server: str) -> str:
        return self.nodes[server]

    def server(self, node: str) -> str:
        """The server a scheduler's node name stands for; raises HostsError naming it."""
        server = self._servers.get(node)
        if server is None:
            raise HostsError("node", f"{node[:64]!r} is not a node of this fabric", "a name from the host map")
        return server

    def resolve(self, name: str) -> str:
        """A server named either way (node name, or Railyard's own): its
        Railyard name. An unknown name comes back as it is, for validation
        to refuse with the field named."""
        return self._servers.get(name, name)

    @functools.cached_property
    def _servers(self) -> dict[str, str]:
        return {node: server for server, node in self.nodes.items()}

    @classmethod
    def identity(cls, fabric: Fabric) -> HostMap:
        """Every server under its own name."""
        return cls({s.name: s.name for s in fabric.servers}, {})


def hosts_from_doc(fabric: Fabric, doc: Any) -> HostMap:
    if not isinstance(doc, dict) or set(doc) != {"hosts"} or not isinstance(doc["hosts"], dict):
        raise HostsError("hosts", "must be a mapping with one key, hosts: {SERVER: NODE, ...}", "see README")
    servers = {s.name: s for s in fabric.servers}
    nodes = {name: name for name in servers}
    nics: dict[str, tuple[str, ...]] = {}
    for server, entry in doc["hosts"].items():
        field = f"hosts.{str(server)[:64]}"
        if server not in servers:
            problem = f"{str(server)[:64]!r} is not a server of fabric {fabric.spec.name}"
            raise HostsError(field, problem, "a server name, ryh<pod>s<index> (railyard fabric show)")
        if not isinstance(entry, dict):
            entry = {"node": entry}
        if not entry.keys() <= {"node", "nics"} or "node" not in entry:
            raise HostsError(field, f"keys {sorted(map(str, entry))}", "node, and optionally nics")
        node = entry["node"]
        if not isinstance(node, str) or len(node) > 253 or NODE_NAME.fullmatch(node) is None:
            raise HostsError(f"{field}.node", f"{str(node)[:64]!r}", NODE_NAME_RULE)
        nodes[server] = node
        if "nics" in entry:
            names = entry["nics"]
            rails = len(servers[server].nics)
            if not isinstance(names, list) or len(names) != rails:
                raise HostsError(f"{field}.nics", f"must list {rails} NIC names, one per rail", "[ens1f0, ...]")
            for name in names:
                if not isinstance(name, str) or NIC_NAME.fullmatch(name) is None:
                    raise HostsError(f"{field}.nics", f"{str(name)[:32]!r}", "an interface name of 1-15 characters")
            if len(set(names)) != rails:
                raise HostsError(f"{field}.nics", "names a NIC twice", "one name per rail")
            nics[server] = tuple(names)
    seen: dict[str, str] = {}
    for server in sorted(nodes):
        other = seen.setdefault(nodes[server], server)
        if other != server:
            raise HostsError(
                f"hosts.{server}", f"node name {nodes[server]!r} is also {other}'s", "a node name of its own per server"
            )
    return HostMap(nodes, nics)


def load_hosts(fabric: Fabric, path: str | Path | None) -> HostMap:
    return HostMap.identity(fabric) if path is None else hosts_from_doc(fabric, read_yaml(path, HostsError))
