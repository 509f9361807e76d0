"""The sFlow agents file (every mistake named, nothing half-loaded), and the
TE decision feed, as the runner's typed decisions reach it."""

from __future__ import annotations

import pytest

from controller.api.te import DecisionFeed, decision_to_proto
from controller.fabric import DEFAULT_SPEC, build_fabric, load_spec
from controller.runtime.te_feed import publisher
from controller.te.engine import Decision, DecisionKind
from controller.telemetry.sflow_agents import AgentsError, load_agents

FABRIC = build_fabric(load_spec(DEFAULT_SPEC))


def test_a_good_file_allows_its_networks_and_names_its_agents(tmp_path):
    path = tmp_path / "agents.yaml"
    path.write_text(
        "networks: [10.20.0.0/24]\nagents:\n  - {address: 10.30.0.11, switch: ryl0r0, ports: {101: 1, 103: 3}}\n"
    )
    policy = load_agents(path, FABRIC)
    assert policy.allows("10.20.0.99") and policy.allows("10.30.0.11")
    assert not policy.allows("127.0.0.1") and not policy.allows("10.30.0.12")
    assert policy.static[0].ports == {101: 1, 103: 3}


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("networks: [banana]", "networks[0]"),
        ("agents: [{address: 10.0.0.1, switch: nope, ports: {1: 1}}]", "agents[0].switch"),
        ("agents: [{address: 10.0.0.1, switch: ryl0r0, ports: {1: 99}}]", "agents[0].ports.1"),
        ("agents: [{address: 10.0.0.1, switch: ryl0r0, ports: {}}]", "agents[0].ports"),
        ("agents: [{address: not-ip, switch: ryl0r0, ports: {1: 1}}]", "agents[0].address"),
        ("agents: [{address: 10.0.0.1, switch: ryl0r0, ports: {1: 1}, colour: red}]", "agents[0].colour"),
        ("agnets: []", "agnets"),
        ("- 1", "<document>"),
    ],
)
def test_each_mistake_names_its_field(tmp_path, text, field):
    path = tmp_path / "agents.yaml"
    path.write_text(text + "\n")
    with pytest.raises(AgentsError) as caught:
        load_agents(path, FABRIC)
    assert caught.value.field == field


def test_each_decision_reaches_every_watcher_with_its_flow_and_both_vias():
    feed = DecisionFeed()
    seen: list = []
    feed.subscribe(seen.append)
    flow = ("10.0.0.1", "10.0.1.1", "tcp", 40000, 5201)
    publish = publisher(feed, programmed=False)
    publish(
        [
            Decision(DecisionKind.REROUTE, "10.0.0.1:40000->10.0.1.1:5201/tcp", "its bottleneck -0.50", 12.5, flow=flow,
                     from_via="rys0", to_via="rys1"),
            Decision(DecisionKind.REROUTE, "10.0.0.1:1->10.0.1.1:2/udp", "adopted", 5.0,
                     flow=("10.0.0.1", "10.0.1.1", "udp", 1, 2), from_via="", to_via="rys1"),
            Decision(DecisionKind.COLLISION, "ryl0r0:3", "2 elephants, demand 2.00 of the link", 12.0, link="ryl0r0:3"),
        ]
    )  # fmt: skip
    move, adopted, collision = seen
    assert move.flow == flow and move.kind == "reroute"
    assert (move.from_via, move.to_via, move.link, move.programmed) == ("rys0", "rys1", None, False)
    message = decision_to_proto(move)
    assert message.flow.src_port == 40000 and message.to_via == "rys1" and not message.programmed
    assert adopted.from_via is None and adopted.to_via == "rys1"  # "" in the record: the path before was not known
    assert (collision.link, collision.flow, collision.to_via) == ("ryl0r0:3", None, None)
