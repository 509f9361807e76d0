"""Routing of a three-tier rail fabric: rail-optimized clusters joined by cores.

The core is built in spine planes, as three-tier Clos fabrics are: spine j of
every cluster is in plane j, and each of the plane's cores takes one uplink
from that spine of every cluster. So a packet crossing clusters meets two
ECMP choices, the spine at its leaf and the core at that spine, and the core
it reaches fixes the rest: it comes down to spine j of the far cluster, and
that spine has one port to the far leaf. A core therefore names a whole
cross-cluster path (it is the path's via, as a fat tree's core is), and a
spine names a path within one cluster.

Port numbering (cabled by builders.py):
- leaf (pod p, rail r): ports 1..S face servers, spine j of its cluster on S+1+j;
- cluster spine: leaf (local pod q, rail r) on port 1 + q*R + r, then the
  i-th core of its plane on port P*R + 1 + i (P pods per cluster);
- core: spine of cluster c (of the core's plane) on port 1 + c.
"""

from __future__ import annotations

from controller.fabric import addressing as ad
from controller.fabric.addressing import NicId
from controller.fabric.model import Endpoint, Switch, Tier
from controller.fabric.spec import FabricSpec
from controller.fabric.topology import Path, Topology


class ClusterTopology(Topology):
    def __init__(self, spec: FabricSpec) -> None:
        assert spec.core is not None
        self.rails = rails = spec.rails
        self.servers = spec.servers_per_pod
        self.clusters = spec.clusters
        self.pods_per_cluster = ppc = spec.pods_per_cluster
        self.spines = spec.spines
        self.cores = spec.core.switches
        self.cores_per_plane = self.cores // self.spines
        self._leaves = [ad.leaf_name(p, r) for p in range(spec.pods) for r in range(rails)]
        self.spine_names = [[ad.cluster_spine_name(c, j) for j in range(self.spines)] for c in range(self.clusters)]
        self.core_names = [ad.core_name(k) for k in range(self.cores)]
        self._spine_at = {name: (c, j) for c, names in enumerate(self.spine_names) for j, name in enumerate(names)}
        self._core_at = {name: k for k, name in enumerate(self.core_names)}
        self._spines_sorted = [tuple(sorted(names)) for names in self.spine_names]
        self._cores_sorted = tuple(sorted(self.core_names))
        self._uplink_ports = tuple(self.leaf_uplink_port(j) for j in range(self.spines))
        self._core_ports = tuple(self.spine_core_port(i) for i in range(self.cores_per_plane))
        # Egress ends of every hop, shared by every path and never rebuilt.
        self._up = [tuple(Endpoint(leaf, port) for port in self._uplink_ports) for leaf in self._leaves]
        self._spine_down = [
            [tuple(Endpoint(name, 1 + q) for q in range(ppc * rails)) for name in names] for names in self.spine_names
        ]
        self._spine_up = [
            [tuple(Endpoint(name, p) for p in self._core_ports) for name in names] for names in self.spine_names
        ]
        self._core_down = [
            tuple(Endpoint(name, self.core_port(c)) for c in range(self.clusters)) for name in self.core_names
        ]

    # --- the numbering the builder cables with ----------------------------
    def access_port(self, server: int) -> int:
        return server + 1

    def leaf_uplink_port(self, j: int) -> int:
        return self.servers + 1 + j

    def spine_port(self, pod: int, rail: int) -> int:
        """The port of a cluster spine facing leaf (pod, rail) of its cluster."""
        return 1 + (pod % self.pods_per_cluster) * self.rails + rail

    def spine_core_port(self, i: int) -> int:
        """The port of a cluster spine facing the i-th core of its plane."""
        return self.pods_per_cluster * self.rails + 1 + i

    def core_port(self, cluster: int) -> int:
        return 1 + cluster

    def plane_cores(self, j: int) -> range:
        """The cores of spine plane j, by index."""
        return range(j * self.cores_per_plane, (j + 1) * self.cores_per_plane)

    def cluster_of(self, pod: int) -> int:
        return pod // self.pods_per_cluster

    # --- routing ----------------------------------------------------------
    def paths(self, src: NicId, dst: NicId) -> list[Path]:
        a = self._leaves[src.pod * self.rails + src.rail]
        b = self._leaves[dst.pod * self.rails + dst.rail]
        if a == b:
            return [(a,)]
        c1, c2 = self.cluster_of(src.pod), self.cluster_of(dst.pod)
        if c1 == c2:
            return [(a, spine, b) for spine in self._spines_sorted[c1]]
        per_plane = self.cores_per_plane
        return sorted(
            (a, self.spine_names[c1][k // per_plane], core, self.spine_names[c2][k // per_plane], b)
            for k, core in enumerate(self.core_names)
        )

    def path_count(self, src: NicId, dst: NicId) -> int:
        if src.pod == dst.pod and src.rail == dst.rail:
            return 1
        return self.spines if self.cluster_of(src.pod) == self.cluster_of(dst.pod) else self.cores

    def vias(self, src: NicId, dst: NicId) -> tuple[str, ...]:
        if src.pod == dst.pod and src.rail == dst.rail:
            return ()
        c1 = self.cluster_of(src.pod)
        return self._spines_sorted[c1] if c1 == self.cluster_of(dst.pod) else self._cores_sorted

    def via_hops(self, src: NicId, dst: NicId, via: str) -> tuple[Endpoint, ...] | None:
        # Placement and TE call this per flow and candidate: plain indexing.
        rails, ppc = self.rails, self.pods_per_cluster
        a, b = src.pod * rails + src.rail, dst.pod * rails + dst.rail
        if a == b:
            return None
        c1, c2 = src.pod // ppc, dst.pod // ppc
        local_b = b - c2 * ppc * rails
        k = self._core_at.get(via)
        if k is not None:
            if c1 == c2:
                return None
            j, i = divmod(k, self.cores_per_plane)
            return (self._up[a][j], self._spine_up[c1][j][i], self._core_down[k][c2], self._spine_down[c2][j][local_b])
        at = self._spine_at.get(via)
        if at is None or at[0] != c1 or c1 != c2:
            return None
        j = at[1]
        return (self._up[a][j], self._spine_down[c1][j][local_b])

    def next_hops(self, switch: Switch, dst: NicId) -> tuple[int, ...]:
        if switch.tier is Tier.LEAF:
            return self._uplink_ports  # any other leaf: up to every spine of its cluster
        if switch.tier is Tier.SPINE:
            if switch.cluster == self.cluster_of(dst.pod):
                return (self.spine_port(dst.pod, dst.rail),)
            return self._core_ports
        if switch.tier is Tier.CORE:
            return (self.core_port(self.cluster_of(dst.pod)),)
        return ()
