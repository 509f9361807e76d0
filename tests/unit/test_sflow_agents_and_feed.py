"""The sFlow agents file (every mistake named, nothing half-loaded), and the
TE decision feed's reading of the runner's decisions."""

from __future__ import annotations

import logging

import pytest

from controller.api.te import DecisionFeed, decision_to_proto
from controller.fabric import DEFAULT_SPEC, build_fabric, load_spec
from controller.runtime.te_feed import RUNNER_LOGGER, DecisionLog, event_of
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


def test_a_move_is_read_with_its_flow_and_both_vias():
    event = event_of(
        "reroute", "10.0.0.1:40000->10.0.1.1:5201/tcp", "rys0 -> rys1: its bottleneck -0.50", 12.5, programmed=False
    )
    assert event.flow == ("10.0.0.1", "10.0.1.1", "tcp", 40000, 5201)
    assert (event.from_via, event.to_via, event.link, event.programmed) == ("rys0", "rys1", None, False)
    message = decision_to_proto(event)
    assert message.flow.src_port == 40000 and message.to_via == "rys1" and not message.programmed
    collision = event_of("collision", "ryl0r0:3", "2 elephants, demand 2.00 of the link", 12.0, programmed=True)
    assert (collision.link, collision.flow, collision.to_via) == ("ryl0r0:3", None, None)


def test_the_runners_log_line_reaches_every_watcher():
    feed = DecisionFeed()
    seen: list = []
    feed.subscribe(seen.append)
    handler = DecisionLog(feed, programmed=True)
    handler.attach()
    try:
        logger = logging.getLogger(RUNNER_LOGGER)
        logger.setLevel(logging.INFO)
        logger.info("te %s %s at %.3f: %s", "reroute", "10.0.0.1:1->10.0.1.1:2/udp", 5.0, " -> rys1: adopted")
        logger.info("something else entirely")
    finally:
        logging.getLogger(RUNNER_LOGGER).removeHandler(handler)
    (event,) = seen
    assert event.flow == ("10.0.0.1", "10.0.1.1", "udp", 1, 2) and event.from_via is None and event.to_via == "rys1"
