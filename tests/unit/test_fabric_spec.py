"""Bad specs are rejected with the exact key named and what is allowed."""

import pytest

from controller.fabric import Kind, SpecError, parse_spec
from controller.fabric.spec import DEFAULT_SPEC, SPECS_DIR, NicArbitration, load_spec

GOOD = {
    "name": "t",
    "kind": "rail-optimized",
    "pods": 2,
    "servers_per_pod": 2,
    "rails": 2,
    "spines": 2,
    "rates": {"nic_gbps": 400, "emulated_nic_mbps": 50},
}


def spec_text(**changes):
    import yaml

    doc = dict(GOOD.items())
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return yaml.safe_dump(doc)


def test_default_spec_loads():
    spec = load_spec(DEFAULT_SPEC)
    assert spec.kind is Kind.RAIL_OPTIMIZED and spec.emulation.mtu == 9000


@pytest.mark.parametrize(
    "changes,field,allowed",
    [
        ({"pods": 0}, "pods", "an integer from 1 to 255"),
        ({"pods": "two"}, "pods", "an integer from 1 to 255"),
        ({"pods": True}, "pods", "an integer from 1 to 255"),
        ({"servers_per_pod": 254}, "servers_per_pod", "an integer from 1 to 253"),
        ({"rails": 17}, "rails", "an integer from 1 to 16"),
        ({"clusters": 2}, "core", "missing (required with clusters)"),
        ({"core": {"switches": 2}}, "clusters", "an integer from 2 to 16"),
        ({"clusters": 1, "core": {"switches": 2}}, "clusters", "an integer from 2 to 16"),
        ({"clusters": 17, "core": {"switches": 2}}, "clusters", "an integer from 2 to 16"),
        ({"clusters": 2, "core": [2]}, "core", "must be a mapping"),
        ({"clusters": 2, "core": {"switches": 3}}, "core.switches", "a multiple of spines (2, 4, ...)"),
        ({"clusters": 2, "core": {"switches": 0}}, "core.switches", "an integer from 1 to 1024"),
        ({"clusters": 2, "core": {"switches": 2, "oversubscription": 0}}, "core.oversubscription", "a number > 0"),
        ({"clusters": 2, "core": {"switches": 2, "spines": 2}}, "core.spines", "oversubscription, switches"),
        (
            {"clusters": 2, "core": {"switches": 2}, "plane_mode": "per-rail"},
            "plane_mode",
            "shared (a core joins each cluster's spine planes)",
        ),
        ({"spines": None}, "spines", ""),
        ({"plane_mode": "mesh"}, "plane_mode", "shared, per-rail"),
        ({"kind": "torus"}, "kind", "rail-optimized, rail-only, fat-tree"),
        ({"oversubscription": -1}, "oversubscription", "a number > 0"),
        ({"oversubscription": float("nan")}, "oversubscription", "a number > 0"),
        ({"rates": {"nic_gbps": 0, "emulated_nic_mbps": 50}}, "rates.nic_gbps", "a number > 0"),
        ({"rates": {"nic_gbps": 400}}, "rates.emulated_nic_mbps", "a number > 0"),
        ({"rates": {"nic_gbps": 400, "emulated_nic_mbps": 50, "x": 1}}, "rates.x", "emulated_nic_mbps, nic_gbps"),
        ({"rates": None}, "rates", "a mapping"),
        ({"emulation": {"mtu": 100}}, "emulation.mtu", "an integer from 1280 to 9000"),
        ({"emulation": {"controller": "6653"}}, "emulation.controller", "tcp:HOST:PORT"),
        ({"emulation": {"ack_priority": "yes"}}, "emulation.ack_priority", "true or false"),
        ({"emulation": {"nic_arbitration": "fair"}}, "emulation.nic_arbitration", "fifo or per-flow"),
        ({"emulation": {"nic_arbitration": ["fifo"]}}, "emulation.nic_arbitration", "fifo or per-flow"),
        ({"emulation": {"receiver_arbitration": "fq"}}, "emulation.receiver_arbitration", "fifo or per-flow"),
        ({"spine": 2}, "spine", "kind, name"),
        ({"name": "has space"}, "name", "1-32 characters"),
    ],
)
def test_bad_spec_names_the_field(changes, field, allowed):
    with pytest.raises(SpecError) as err:
        parse_spec(spec_text(**changes))
    assert err.value.field == field
    assert allowed in str(err.value)
    assert f"'{field}'" in str(err.value)


def test_ack_priority_is_off_unless_a_spec_asks():
    assert parse_spec(spec_text()).emulation.ack_priority is False
    assert parse_spec(spec_text(emulation={"ack_priority": True})).emulation.ack_priority is True
    assert load_spec(SPECS_DIR / "three-tier.yaml").emulation.ack_priority is True


def test_access_links_have_one_queue_each_way_unless_a_spec_asks_for_one_per_flow():
    default = parse_spec(spec_text()).emulation
    assert default.nic_arbitration is default.receiver_arbitration is NicArbitration.FIFO
    asked = parse_spec(spec_text(emulation={"nic_arbitration": "per-flow"})).emulation
    assert asked.nic_arbitration is NicArbitration.PER_FLOW and asked.receiver_arbitration is NicArbitration.FIFO
    receiver = parse_spec(spec_text(emulation={"receiver_arbitration": "per-flow"})).emulation
    assert receiver.receiver_arbitration is NicArbitration.PER_FLOW and receiver.nic_arbitration is NicArbitration.FIFO


def test_fat_tree_k_must_be_even():
    with pytest.raises(SpecError) as err:
        parse_spec("kind: fat-tree\nk: 5\nrates: {nic_gbps: 1, emulated_nic_mbps: 10}\n")
    assert err.value.field == "k" and "even" in str(err.value)


def test_keys_of_another_kind_are_rejected():
    with pytest.raises(SpecError) as err:
        parse_spec("kind: fat-tree\nk: 4\npods: 2\nrates: {nic_gbps: 1, emulated_nic_mbps: 10}\n")
    assert err.value.field == "pods" and "unknown key for kind fat-tree" in str(err.value)


@pytest.mark.parametrize("text", ["- a\n- b\n", "pods: [\n", "42"])
def test_non_mapping_documents_are_rejected(text):
    with pytest.raises(SpecError) as err:
        parse_spec(text)
    assert err.value.field == "<document>"


def test_missing_file_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError) as err:
        load_spec(tmp_path / "nope.yaml")
    assert "cannot read" in str(err.value)


def test_clusters_multiply_pods_and_keep_the_core():
    spec = parse_spec(spec_text(clusters=3, core={"switches": 4, "oversubscription": 7}))
    assert (spec.clusters, spec.pods, spec.pods_per_cluster) == (3, 6, 2)
    assert spec.core is not None and (spec.core.switches, spec.core.oversubscription) == (4, 7.0)
    assert [spec.cluster_of(p) for p in range(6)] == [0, 0, 1, 1, 2, 2]
    assert parse_spec(spec_text()).core is None
