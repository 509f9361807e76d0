"""Scheduler exports against golden files written by hand for the demo and
three-tier specs and their host maps, the host map's validation, and Slurm
hostlist expressions."""

from pathlib import Path

import pytest
import yaml

from controller.fabric import load_fabric
from controller.fabric.spec import SPECS_DIR
from controller.schedulers.exports import EXPORTERS
from controller.schedulers.hostlist import compress
from controller.schedulers.hosts import HostMap, HostsError, hosts_from_doc, load_hosts

DATA = Path(__file__).parent.parent / "data" / "exports"
DEMO = load_fabric()
HOSTS = load_hosts(DEMO, DATA / "demo-hosts.yaml")
THREE_TIER = load_fabric(SPECS_DIR / "three-tier.yaml")
GOLDEN = {  # golden file prefix -> the fabric and host map they were written from
    "demo": (DEMO, HOSTS),
    "three-tier": (THREE_TIER, load_hosts(THREE_TIER, DATA / "three-tier-hosts.yaml")),
}


def slurm_lines(text: str) -> list[str]:
    """topology.conf without comments: what slurmctld reads."""
    return [line.split("#")[0].strip() for line in text.splitlines() if line.split("#")[0].strip()]


@pytest.mark.parametrize("name", list(GOLDEN))
def test_the_slurm_tree_matches_the_golden_file(name):
    fabric, hosts = GOLDEN[name]
    golden = (DATA / f"{name}-slurm-tree.conf").read_text()
    assert slurm_lines(EXPORTERS["slurm-tree"](fabric, hosts)) == slurm_lines(golden)


@pytest.mark.parametrize("name", list(GOLDEN))
@pytest.mark.parametrize("kind", ["slurm-block", "kueue", "volcano", "topograph-labels"])
def test_the_yaml_exports_parse_and_match_the_golden_files(name, kind):
    fabric, hosts = GOLDEN[name]
    made = list(yaml.safe_load_all(EXPORTERS[kind](fabric, hosts)))
    golden = list(yaml.safe_load_all((DATA / f"{name}-{kind}.yaml").read_text()))
    assert made == golden


def test_a_fat_tree_exports_its_pods_as_a_level_of_their_own():
    fabric = load_fabric(SPECS_DIR / "fat-tree-k4.yaml")
    hosts = HostMap.identity(fabric)
    tree = slurm_lines(EXPORTERS["slurm-tree"](fabric, hosts))
    assert "SwitchName=rye0x0 Nodes=ryh0s[0-1]" in tree and "SwitchName=rya0x0 Switches=rye0x[0-1]" in tree
    assert "SwitchName=rys0 Switches=rya0x0,rya1x0,rya2x0,rya3x0" in tree
    (topology, _flavor, *nodes) = yaml.safe_load_all(EXPORTERS["kueue"](fabric, hosts))
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == [
        "railyard.io/spine-block", "railyard.io/pod", "railyard.io/leaf-group", "kubernetes.io/hostname",
    ]  # fmt: skip
    assert len(nodes) == 16 and nodes[0]["metadata"]["labels"]["railyard.io/pod"] == "ryp0"
    hypernodes = list(yaml.safe_load_all(EXPORTERS["volcano"](fabric, hosts)))
    assert sorted({h["spec"]["tier"] for h in hypernodes}) == [1, 2, 3]
    block = yaml.safe_load(EXPORTERS["slurm-block"](fabric, hosts))[0]["block"]
    assert block["block_sizes"] == [4, 8, 16] and len(block["blocks"]) == 4


def test_slurm_blocks_of_a_large_three_tier_fabric_never_straddle_a_cluster():
    # 14 pods a cluster: Slurm's runs of 4 aligned pods (blocks 12-15) would
    # take 2 pods of cluster 0 and 2 of cluster 1, so sizes stop at 2 pods.
    fabric = load_fabric(SPECS_DIR / "meta-32k.yaml")
    block = yaml.safe_load(EXPORTERS["slurm-block"](fabric, HostMap.identity(fabric)))[0]["block"]
    assert block["block_sizes"] == [36, 72]
    assert [b["block"] for b in block["blocks"]] == [f"ryl{pod}" for pod in range(fabric.spec.pods)]


def test_every_exporter_covers_every_server_of_a_large_fabric():
    fabric = load_fabric(SPECS_DIR / "rail-2k.yaml")
    hosts = HostMap.identity(fabric)
    labelled = list(yaml.safe_load_all(EXPORTERS["topograph-labels"](fabric, hosts)))
    assert {n["metadata"]["name"] for n in labelled} == {s.name for s in fabric.servers}
    spines = [ln for ln in slurm_lines(EXPORTERS["slurm-tree"](fabric, hosts)) if "Switches=" in ln]
    assert len(spines) == len([s for s in fabric.switches.values() if s.tier.value == "spine"])


@pytest.mark.parametrize(
    ("doc", "field", "words"),
    [
        ({"hosts": {"ryh9s9": "gpu-x"}}, "hosts.ryh9s9", "is not a server of fabric demo"),
        ({"hosts": {"ryh0s0": "GPU_A"}}, "hosts.ryh0s0.node", "lowercase RFC 1123"),
        ({"hosts": {"ryh0s0": "gpu-x", "ryh0s1": "gpu-x"}}, "hosts.ryh0s1", "is also ryh0s0's"),
        ({"hosts": {"ryh0s0": "ryh0s1"}}, "hosts.ryh0s1", "is also ryh0s0's"),  # a default name taken
        ({"hosts": {"ryh0s0": {"node": "a", "nics": ["e0"]}}}, "hosts.ryh0s0.nics", "must list 2 NIC names"),
        ({"hosts": {"ryh0s0": {"node": "a", "nics": ["e0", "e0"]}}}, "hosts.ryh0s0.nics", "names a NIC twice"),
        ({"hosts": {"ryh0s0": {"nodes": "a"}}}, "hosts.ryh0s0", "node, and optionally nics"),
        ({"servers": {}}, "hosts", "one key, hosts"),
    ],
)
def test_a_bad_host_map_names_its_field(doc, field, words):
    with pytest.raises(HostsError) as err:
        hosts_from_doc(DEMO, doc)
    assert err.value.field == field and words in str(err.value)


def test_a_host_map_names_servers_both_ways():
    assert HOSTS.node("ryh0s1") == "gpu-a002" and HOSTS.server("gpu-b002") == "ryh1s1"
    assert HOSTS.nics["ryh0s1"] == ("ens1f0", "ens2f0")
    with pytest.raises(HostsError, match="not a node of this fabric"):
        HOSTS.server("ryh0s0")  # renamed: its Railyard name is not a node name any more


@pytest.mark.parametrize(
    ("names", "expression"),
    [
        (["n1"], "n1"),
        (["ryh0s0", "ryh0s1", "ryh1s0", "ryh1s1"], "ryh0s[0-1],ryh1s[0-1]"),
        (["gpu-a001", "gpu-a002", "gpu-a003", "gpu-a007", "gpu-a100"], "gpu-a[001-003,007,100]"),
        (["n9", "n10", "n11", "login"], "n9,n[10-11],login"),
        (["n3", "n1", "n2", "n1"], "n[1-3]"),
    ],
)
def test_hostlists_compress_as_slurm_expands_them(names, expression):
    assert compress(names) == expression
