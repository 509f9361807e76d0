"""A real slurmctld (Debian's slurm-wlm 22.05, with munge, on loopback)
loads the topology.conf Railyard exports, and `scontrol show topology`
lists every leaf and spine (three tiers: every leaf, cluster and core) with
the right nodes, expanded by Slurm's own hostlist parser, and logs no
warning about the topology."""

import re
import subprocess
from pathlib import Path

import pytest

from controller.fabric import load_fabric
from controller.fabric.spec import SPECS_DIR
from controller.schedulers.exports import slurm_tree
from controller.schedulers.hostlist import compress
from controller.schedulers.hosts import HostMap, load_hosts
from controller.schedulers.topology import fabric_tree
from emulation.processes.slurm_local import LocalSlurm

DATA = Path(__file__).parent.parent / "data" / "exports"
# What slurmctld 22.05's topology/tree logs about a topology.conf it accepts
# but finds wrong (a node under two leaves, a switch with no nodes, nodes no
# switch reaches, no switch over every node): error() lines and one info().
TOPOLOGY_WARNINGS = re.compile(r"WARNING|TOPOLOGY: warning|switch \S+ has ", re.IGNORECASE)


def switches(slurm: LocalSlurm) -> dict[str, dict[str, str]]:
    shown = slurm.scontrol("show", "topology")
    assert shown.returncode == 0, shown.stderr
    out = {}
    for line in shown.stdout.splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        out[fields["SwitchName"]] = fields
    return out


def expand(slurm: LocalSlurm, expression: str) -> set[str]:
    shown = slurm.scontrol("show", "hostnames", expression)
    assert shown.returncode == 0, shown.stderr
    return set(shown.stdout.split())


@pytest.mark.parametrize(
    ("spec", "hosts"),
    [
        (None, DATA / "demo-hosts.yaml"),
        (SPECS_DIR / "fat-tree-k4.yaml", None),
        (SPECS_DIR / "three-tier.yaml", DATA / "three-tier-hosts.yaml"),
    ],
    ids=["demo-with-host-names", "fat-tree-k4", "three-tier-with-host-names"],
)
def test_slurmctld_loads_the_exported_tree_with_every_leaf_and_spine(spec, hosts, tmp_path):
    fabric = load_fabric(spec)
    host_map = load_hosts(fabric, hosts) if hosts else HostMap.identity(fabric)
    tree = fabric_tree(fabric)
    every_node = {host_map.node(s.name) for s in fabric.servers}
    with LocalSlurm(compress(sorted(every_node)), slurm_tree(fabric, host_map), tmp_path / "slurm") as slurm:
        shown = switches(slurm)
        log = slurm.log()
        assert [line for line in log.splitlines() if TOPOLOGY_WARNINGS.search(line)] == [], log
        for group in tree.groups:
            assert shown[group.name]["Level"] == "0"
            assert expand(slurm, shown[group.name]["Nodes"]) == {host_map.node(s) for s in group.servers}
        servers_of = {g.name: {host_map.node(s) for s in g.servers} for g in tree.groups}
        for agg in tree.aggs:
            assert shown[agg.name]["Level"] == "1"
            assert expand(slurm, shown[agg.name]["Nodes"]) == set().union(*(servers_of[c] for c in agg.children))
        for cluster in tree.clusters:
            assert shown[cluster.name]["Level"] == "1"
            assert expand(slurm, shown[cluster.name]["Nodes"]) == set().union(*(servers_of[g] for g in cluster.groups))
            assert expand(slurm, shown[cluster.name]["Switches"]) == set(cluster.groups)
        for top in tree.top:  # the spines, or the cores over the clusters
            assert shown[top.name]["Level"] == ("2" if tree.aggs or tree.clusters else "1")
            assert expand(slurm, shown[top.name]["Nodes"]) == every_node  # every top switch reaches every node
            assert expand(slurm, shown[top.name]["Switches"]) == set(top.children)
        middle = {s.name for s in tree.aggs} | {c.name for c in tree.clusters}
        assert set(shown) == {g.name for g in tree.groups} | middle | {s.name for s in tree.top}


def test_the_test_slurmctld_listens_on_loopback_only(tmp_path):
    fabric = load_fabric()
    host_map = HostMap.identity(fabric)
    nodes = compress(sorted(s.name for s in fabric.servers))
    with LocalSlurm(nodes, slurm_tree(fabric, host_map), tmp_path / "slurm") as slurm:
        listening = subprocess.run(
            ["ss", "-Hltn", f"sport = :{slurm.ctld_port}"], capture_output=True, text=True, check=True
        ).stdout.split("\n")
        local = {line.split()[3] for line in listening if line.strip()}
    assert local == {f"127.0.0.1:{slurm.ctld_port}"}, local
