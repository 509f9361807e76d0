"""Scenario files and the report's arithmetic."""

import pytest

from controller.fabric import load_fabric
from emulation.scenarios.report import jain, longest_zero_run_s, percentile
from emulation.scenarios.spec import ScenarioError, available, incast_pairs, load_scenario, permutation_pairs

FABRIC = load_fabric()


def test_every_shipped_scenario_loads():
    assert set(available()) >= {"elephant", "incast", "allreduce", "alltoall", "link-failure"}
    for name in available():
        scenario = load_scenario(name)
        assert scenario.name == name and scenario.duration_s >= 3
    (event,) = load_scenario("link-failure").events
    assert event.link == "ryl0r0:3" and 0 < event.at_s < 12


def test_bad_scenarios_name_the_field(tmp_path):
    cases = {
        "traffic.pattern": "traffic: {pattern: spiral}",
        "traffic.protocol": "traffic: {pattern: incast, protocol: sctp}",
        "duration_s": "duration_s: 1\ntraffic: {pattern: permutation}",
        "events[0].at_s": "duration_s: 5\ntraffic: {pattern: permutation}\nevents: [{at_s: 9, link_down: ryl0r0:3}]",
    }
    for field, text in cases.items():
        path = tmp_path / "s.yaml"
        path.write_text(text)
        with pytest.raises(ScenarioError) as err:
            load_scenario(str(path))
        assert err.value.field == field and err.value.allowed
    with pytest.raises(ScenarioError, match="elephant"):
        load_scenario("no-such-scenario")


def test_traffic_patterns_cross_pods_and_converge():
    pairs = permutation_pairs(FABRIC)
    assert len(pairs) == len(FABRIC.nics) and all(a.pod != b.pod and a.rail == b.rail for a, b in pairs)
    with pytest.raises(ScenarioError, match=r"fan_in.*at most 2"):
        incast_pairs(FABRIC, 3, seed=1)  # the demo fabric has 2 NICs per rail outside any pod
    three_pod = load_fabric(load_scenario("incast").spec_path())
    senders, bystander = incast_pairs(three_pod, 3, seed=1)
    assert len({dst for _, dst in senders}) == 1 and len({src for src, _ in senders}) == 3
    (dst,) = {dst for _, dst in senders}
    assert bystander is not None
    src, beside = bystander
    # The bystander shares the receiver's leaf (so the senders' spine downlinks),
    # not the receiver nor any sender's NIC.
    assert src.pod != dst.pod and src not in {s for s, _ in senders}
    assert all(s.pod != dst.pod for s, _ in senders)  # the incast crosses the spine tier
    assert beside != dst and three_pod.attachment(beside).node == three_pod.attachment(dst).node
    assert len({n.rail for pair in [*senders, bystander] for n in pair}) == 1


def test_report_arithmetic():
    assert jain([1, 1, 1, 1]) == pytest.approx(1.0)
    assert jain([1, 0, 0, 0]) == pytest.approx(0.25)
    assert longest_zero_run_s((5e6, 0.0, 0.0, 3e6, 0.0)) == 2
    assert percentile([1, 2, 3, 4, 100], 0.99) == 100 and percentile([], 0.5) == 0.0
