"""Every scheduler export against its upstream definition, not against our
own reading of it: Kueue's and Volcano's CRDs vendored with the commit they
came from (tests/data/crds/README.md), validated as the API server would
(the served version's OpenAPI schema, unknown fields refused as
`kubectl apply --validate=strict` refuses them, and every CEL rule);
Topograph 1.0's labels; and Slurm's topology/block in both files, per the
release's man pages."""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from controller.fabric import load_fabric
from controller.schedulers.exports import EXPORTERS, SlurmVersionError, slurm_block
from controller.schedulers.hosts import HostMap, load_hosts

DATA = Path(__file__).parent.parent / "data"
CRDS = DATA / "crds"
SPECS = ["default.yaml", "three-pod.yaml", "fat-tree-k4.yaml", "three-tier.yaml", "rail-2k.yaml"]

# Kubernetes' own name rules (apimachinery validation): object names are
# DNS-1123 subdomains; label keys an optional DNS prefix and a name; values
# at most 63 characters of the same alphabet.
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def crd(name: str) -> dict:
    return yaml.safe_load((CRDS / name).read_text())


CRD_OF = {
    ("kueue.x-k8s.io", "Topology"): crd("kueue.x-k8s.io_topologies.yaml"),
    ("kueue.x-k8s.io", "ResourceFlavor"): crd("kueue.x-k8s.io_resourceflavors.yaml"),
    ("topology.volcano.sh", "HyperNode"): crd("topology.volcano.sh_hypernodes.yaml"),
}


def served_schema(doc: dict) -> dict:
    group, version = doc["apiVersion"].split("/")
    definition = CRD_OF[(group, doc["kind"])]
    (served,) = [v for v in definition["spec"]["versions"] if v["name"] == version and v["served"]]
    assert not served.get("deprecated"), f"{doc['apiVersion']} {doc['kind']} is deprecated upstream"
    return served["schema"]["openAPIV3Schema"]


def strict(schema: dict) -> dict:
    """The schema with unknown fields refused wherever it lists the fields:
    the API server prunes them silently, and a pruned field is a setting lost."""
    schema = copy.deepcopy(schema)

    def close(node: dict) -> None:
        if "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        for child in node.get("properties", {}).values():
            close(child)
        if isinstance(node.get("items"), dict):
            close(node["items"])
        if isinstance(node.get("additionalProperties"), dict):
            close(node["additionalProperties"])

    close(schema)
    return schema


# Every CEL rule of the vendored CRDs, as Python over the same value. The
# rules that compare with `oldSelf` apply to updates only; an export is a
# creation, so they hold trivially and are listed as such.
def _unique(items: list) -> bool:
    return all(items.count(item) == 1 for item in items)


def _all(field: str, test: Callable[[dict], bool]) -> Callable[[list], bool]:
    return lambda items: all(test(x) for x in items)


ON_UPDATE_ONLY = "on update only"
CEL: dict[str, Callable[[Any], bool] | str] = {
    "self == oldSelf": ON_UPDATE_ONLY,
    "!has(oldSelf.topologyName) || (has(self.nodeLabels) == has(oldSelf.nodeLabels) && (!has(self.nodeLabels) || "
    "self.nodeLabels == oldSelf.nodeLabels))": ON_UPDATE_ONLY,
    "!has(oldSelf.topologyName) || (has(self.tolerations) == has(oldSelf.tolerations) && (!has(self.tolerations) || "
    "self.tolerations == oldSelf.tolerations))": ON_UPDATE_ONLY,
    "!has(oldSelf.topologyName) || (has(self.topologyName) && self.topologyName == oldSelf.topologyName)": (
        ON_UPDATE_ONLY
    ),
    "size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0": _unique,
    "size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || self[size(self) - 1].nodeLabel == "
    "'kubernetes.io/hostname'": lambda levels: (
        all(x["nodeLabel"] != "kubernetes.io/hostname" for x in levels)
        or levels[-1]["nodeLabel"] == "kubernetes.io/hostname"
    ),
    "!has(self.topologyName) || self.nodeLabels.size() >= 1": lambda spec: (
        "topologyName" not in spec or len(spec.get("nodeLabels", {})) >= 1
    ),
    "self.all(x, x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": _all(
        "effect", lambda x: x["effect"] in ("NoSchedule", "PreferNoSchedule", "NoExecute")
    ),
    "self.all(x, !has(x.key) ? x.operator == 'Exists' : true)": _all(
        "key", lambda x: "key" in x or x.get("operator") == "Exists"
    ),
    "self.all(x, has(x.tolerationSeconds) ? x.effect == 'NoExecute' : true)": _all(
        "tolerationSeconds", lambda x: "tolerationSeconds" not in x or x.get("effect") == "NoExecute"
    ),
    "self.all(x, !has(x.operator) || x.operator in ['Equal', 'Exists'])": _all(
        "operator", lambda x: x.get("operator", "Equal") in ("Equal", "Exists")
    ),
    "self.all(x, has(x.operator) && x.operator == 'Exists' ? !has(x.value) : true)": _all(
        "value", lambda x: not (x.get("operator") == "Exists" and "value" in x)
    ),
    "self.all(x, !has(x.effect) || x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": _all(
        "effect", lambda x: x.get("effect", "NoSchedule") in ("NoSchedule", "PreferNoSchedule", "NoExecute")
    ),
    "has(self.exactMatch) || has(self.regexMatch) || has(self.labelMatch)": lambda s: bool(
        {"exactMatch", "regexMatch", "labelMatch"} & s.keys()
    ),
    "(has(self.exactMatch) ? 1 : 0) + (has(self.regexMatch) ? 1 : 0) + (has(self.labelMatch) ? 1 : 0) <= 1": (
        lambda s: len({"exactMatch", "regexMatch", "labelMatch"} & s.keys()) <= 1
    ),
}


def _rule(text: str) -> str:
    return " ".join(text.split())


def cel_rules(schema: dict, value: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path, rule, value) for every CEL rule on a node the document has."""
    for rule in schema.get("x-kubernetes-validations", []):
        yield path, _rule(rule["rule"]), value
    if isinstance(value, dict):
        for key, child in schema.get("properties", {}).items():
            if key in value:
                yield from cel_rules(child, value[key], f"{path}.{key}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from cel_rules(schema["items"], item, f"{path}[{i}]")


def every_rule(schema: dict) -> Iterator[str]:
    for rule in schema.get("x-kubernetes-validations", []):
        yield _rule(rule["rule"])
    for child in schema.get("properties", {}).values():
        yield from every_rule(child)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from every_rule(schema[key])


def check_object(doc: dict) -> None:
    """What the API server checks on `kubectl apply --validate=strict` of a new object."""
    assert DNS_SUBDOMAIN.fullmatch(doc["metadata"]["name"]) and len(doc["metadata"]["name"]) <= 253, doc["metadata"]
    for key, label in doc["metadata"].get("labels", {}).items():
        prefix, _, name = key.rpartition("/")
        assert not prefix or (DNS_SUBDOMAIN.fullmatch(prefix) and len(prefix) <= 253), key
        assert LABEL_NAME.fullmatch(name) and len(name) <= 63, key
        assert LABEL_VALUE.fullmatch(label) and len(label) <= 63, (key, label)
    if doc["apiVersion"] == "v1":
        assert doc["kind"] == "Node" and set(doc) == {"apiVersion", "kind", "metadata"}
        return
    schema = served_schema(doc)
    jsonschema.Draft7Validator(strict(schema)).validate(doc)
    for path, rule, value in cel_rules(schema, doc):
        check = CEL[rule]
        assert isinstance(check, str) or check(value), f"{doc['kind']} {path}: CEL rule {rule!r} fails"


def exported(kind: str, spec: str) -> list[dict]:
    fabric = load_fabric(spec)
    return list(yaml.safe_load_all(EXPORTERS[kind](fabric, HostMap.identity(fabric))))


def test_every_cel_rule_of_the_vendored_crds_is_known_to_this_test():
    for definition in CRD_OF.values():
        for version in definition["spec"]["versions"]:
            unknown = set(every_rule(version["schema"]["openAPIV3Schema"])) - CEL.keys()
            assert not unknown, f"{definition['metadata']['name']} {version['name']}: new CEL rules {unknown}"


@pytest.mark.parametrize("spec", SPECS)
def test_the_kueue_export_is_a_valid_topology_flavor_and_nodes_for_kueue_v1beta2(spec):
    docs = exported("kueue", spec)
    assert [d["kind"] for d in docs[:2]] == ["Topology", "ResourceFlavor"]
    topology, flavor, *nodes = docs
    for doc in docs:
        check_object(doc)
    assert flavor["spec"]["topologyName"] == topology["metadata"]["name"]
    levels = [level["nodeLabel"] for level in topology["spec"]["levels"]]
    for node in nodes:
        # The flavor selects every node, and every node has every level the topology names.
        assert flavor["spec"]["nodeLabels"].items() <= node["metadata"]["labels"].items()
        assert set(levels) - {"kubernetes.io/hostname"} <= node["metadata"]["labels"].keys()


@pytest.mark.parametrize("spec", SPECS)
def test_the_volcano_export_is_valid_hypernodes_whose_members_exist(spec):
    docs = exported("volcano", spec)
    names = {d["metadata"]["name"] for d in docs}
    fabric = load_fabric(spec)
    nodes = {s.name for s in fabric.servers}
    for doc in docs:
        check_object(doc)
        for member in doc["spec"]["members"]:
            assert member["selector"]["exactMatch"]["name"] in (nodes if member["type"] == "Node" else names)


@pytest.mark.parametrize("spec", SPECS)
def test_topograph_labels_are_the_1_0_tiers_closest_first(spec):
    docs = exported("topograph-labels", spec)
    fabric = load_fabric(spec)
    assert {d["metadata"]["name"] for d in docs} == {s.name for s in fabric.servers}
    for doc in docs:
        check_object(doc)
        labels = doc["metadata"]["labels"]
        assert list(labels) == [f"fabric.topograph.run/tier-{i}" for i in range(len(labels))], labels
        assert not [k for k in labels if k.startswith("network.topology.nvidia.com/")]  # the pre-1.0 keys
    tiers = {len(d["metadata"]["labels"]) for d in docs}
    assert tiers == {3 if fabric.spec.clusters > 1 or fabric.spec.kind.value == "fat-tree" else 2}


def test_a_schema_check_can_fail():
    """The checks above refuse what the API server would refuse."""
    (topology, flavor, *_) = exported("kueue", "default.yaml")
    bad_level = copy.deepcopy(topology)
    bad_level["spec"]["levels"].append({"nodeLabel": "railyard.io/leaf-group"})  # a level twice
    no_labels = copy.deepcopy(flavor)
    no_labels["spec"]["nodeLabels"] = {}
    typo = copy.deepcopy(flavor)
    typo["spec"]["topology"] = typo["spec"].pop("topologyName")  # pruned by the server: refused here
    hostname_first = copy.deepcopy(topology)
    hostname_first["spec"]["levels"].reverse()
    hypernode = exported("volcano", "default.yaml")[0]
    two_selectors = copy.deepcopy(hypernode)
    two_selectors["spec"]["members"][0]["selector"]["regexMatch"] = {"pattern": ".*"}
    string_tier = copy.deepcopy(hypernode)
    string_tier["spec"]["tier"] = "1"
    for doc in (bad_level, no_labels, typo, hostname_first, two_selectors, string_tier):
        with pytest.raises((AssertionError, jsonschema.ValidationError)):
            check_object(doc)


# --- Slurm topology/block ------------------------------------------------------


def parse_block_conf(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """topology.conf(5) for topology/block: `BlockName=X Nodes=Y` lines, then
    one `BlockSizes=` (24.05, 24.11) or `BlockLevels=` (23.11) line."""
    blocks, settings = {}, {}
    for line in (ln.split("#")[0].strip() for ln in text.splitlines()):
        if not line:
            continue
        fields = dict(part.split("=", 1) for part in line.split())
        if "BlockName" in fields:
            assert set(fields) == {"BlockName", "Nodes"}, line
            assert fields["BlockName"] not in blocks, line
            blocks[fields["BlockName"]] = fields["Nodes"]
        else:
            assert len(fields) == 1 and fields.keys() <= {"BlockSizes", "BlockLevels"}, line
            settings.update(fields)
    return blocks, settings


def test_slurm_block_is_topology_yaml_for_25_05_and_topology_conf_before():
    fabric = load_fabric("three-tier.yaml")
    hosts = load_hosts(fabric, DATA / "exports" / "three-tier-hosts.yaml")
    yaml_doc = yaml.safe_load(slurm_block(fabric, hosts, "25.05"))
    (topology,) = yaml_doc
    assert list(topology) == ["topology", "cluster_default", "block"]  # topology.yaml(5): `topology` first
    block = topology["block"]
    sizes = block["block_sizes"]
    # topology.yaml(5): successive sizes a power of two larger than the prior.
    assert all(b > a and b % a == 0 and (b // a) & (b // a - 1) == 0 for a, b in itertools.pairwise(sizes))
    for version, setting in (("24.05", "BlockSizes"), ("24.11", "BlockSizes"), ("23.11", "BlockLevels")):
        blocks, settings = parse_block_conf(slurm_block(fabric, hosts, version))
        assert blocks == {b["block"]: b["nodes"] for b in block["blocks"]}, version  # the same blocks
        assert list(settings) == [setting]
    assert parse_block_conf(slurm_block(fabric, hosts, "24.11"))[1]["BlockSizes"] == ",".join(map(str, sizes))
    # 23.11: level i joins 2^i base blocks, so sizes 2, 4, 8 are levels 0, 1, 2.
    assert parse_block_conf(slurm_block(fabric, hosts, "23.11"))[1]["BlockLevels"] == "0,1,2"
    assert slurm_block(fabric, hosts, "25.11") == slurm_block(fabric, hosts, "25.05").replace("25.05", "25.11")


@pytest.mark.parametrize("name", ["demo", "three-tier"])
@pytest.mark.parametrize("version", ["24.05", "23.11"])
def test_slurm_block_conf_matches_the_golden_file(name, version):
    fabric = load_fabric("default.yaml" if name == "demo" else "three-tier.yaml")
    hosts = load_hosts(fabric, DATA / "exports" / f"{name}-hosts.yaml")
    golden = (DATA / "exports" / f"{name}-slurm-block-{version}.conf").read_text()
    assert parse_block_conf(slurm_block(fabric, hosts, version)) == parse_block_conf(golden)


@pytest.mark.parametrize("version", ["23.05", "22.05", "24", "latest", ""])
def test_a_slurm_release_without_topology_block_is_refused_by_name(version):
    fabric = load_fabric()
    with pytest.raises(SlurmVersionError) as err:
        slurm_block(fabric, HostMap.identity(fabric), version)
    assert err.value.field == "slurm-version" and "23.11 or later" in str(err.value)
