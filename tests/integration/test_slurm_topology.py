"""A real slurmctld (Debian's slurm-wlm 22.05, with munge, on loopback)
loads the topology.conf Railyard exports, and `scontrol show topology`
lists every leaf and spine with the right nodes, expanded by Slurm's own
hostlist parser."""

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
    [(None, DATA / "demo-hosts.yaml"), (SPECS_DIR / "fat-tree-k4.yaml", None)],
    ids=["demo-with-host-names", "fat-tree-k4"],
)
def test_slurmctld_loads_the_exported_tree_with_every_leaf_and_spine(spec, hosts, tmp_path):
    fabric = load_fabric(spec)
    host_map = load_hosts(fabric, hosts) if hosts else HostMap.identity(fabric)
    tree = fabric_tree(fabric)
    every_node = {host_map.node(s.name) for s in fabric.servers}
    with LocalSlurm(compress(sorted(every_node)), slurm_tree(fabric, host_map), tmp_path / "slurm") as slurm:
        shown = switches(slurm)
        log = slurm.log()
        assert "Multiple leaf switches" not in log, log
        for group in tree.groups:
            assert shown[group.name]["Level"] == "0"
            assert expand(slurm, shown[group.name]["Nodes"]) == {host_map.node(s) for s in group.servers}
        servers_of = {g.name: {host_map.node(s) for s in g.servers} for g in tree.groups}
        for agg in tree.aggs:
            assert shown[agg.name]["Level"] == "1"
            assert expand(slurm, shown[agg.name]["Nodes"]) == set().union(*(servers_of[c] for c in agg.children))
        for spine in tree.spines:
            assert shown[spine.name]["Level"] == ("2" if tree.aggs else "1")
            assert expand(slurm, shown[spine.name]["Nodes"]) == every_node  # every spine reaches every node
            assert expand(slurm, shown[spine.name]["Switches"]) == set(spine.children)
        assert set(shown) == {g.name for g in tree.groups} | {s.name for s in (*tree.aggs, *tree.spines)}
