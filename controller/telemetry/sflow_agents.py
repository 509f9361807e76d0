"""The sFlow agents file: which agents the collector hears, and who they are.

    # Agents that name their switch by OpenFlow datapath id in their counter
    # samples (Open vSwitch does), from these networks:
    networks: [10.20.0.0/24]
    # Agents that do not (SONiC, EOS, Cumulus, Junos): the switch each is,
    # and its ifIndex -> the spec's port numbers.
    agents:
      - {address: 10.20.0.11, switch: ryl0r0, ports: {1: 1, 2: 2, 49: 3, 50: 4}}

Without a file, agents on loopback addresses are heard (the emulation's Open
vSwitch, all on this host). Every other address is refused and counted.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from controller.errors import FieldError
from controller.fabric import Fabric
from controller.telemetry.sflow_fold import AgentPolicy, StaticAgent
from controller.yamldoc import read_yaml


class AgentsError(FieldError):
    context = "sflow agents"


MAX_AGENTS = 10_000


def load_agents(path: Path, fabric: Fabric) -> AgentPolicy:
    doc = read_yaml(path, AgentsError)
    if not isinstance(doc, dict):
        raise AgentsError("<document>", f"a {type(doc).__name__}", "a mapping with networks and/or agents")
    unknown = sorted(set(doc) - {"networks", "agents"})
    if unknown:
        raise AgentsError(str(unknown[0])[:64], "unknown key", "networks, agents")
    networks = tuple(_network(v, f"networks[{i}]") for i, v in enumerate(_list(doc, "networks")))
    agents = _list(doc, "agents")
    if len(agents) > MAX_AGENTS:
        raise AgentsError("agents", f"{len(agents)} agents", f"at most {MAX_AGENTS}")
    static = tuple(_agent(fabric, a, f"agents[{i}]") for i, a in enumerate(agents))
    seen: set[tuple[str, int]] = set()
    for i, agent in enumerate(static):
        if (agent.address, agent.sub_agent) in seen:
            raise AgentsError(f"agents[{i}].address", f"{agent.address} sub-agent {agent.sub_agent} twice", "once")
        seen.add((agent.address, agent.sub_agent))
    return AgentPolicy(networks, static)


def _list(doc: dict, key: str) -> list:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise AgentsError(key, f"a {type(value).__name__}", "a list")
    return value


def _network(value: Any, where: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        raise AgentsError(where, f"{str(value)[:64]!r} is not an address or network", "e.g. 10.20.0.0/24") from None


def _agent(fabric: Fabric, value: Any, where: str) -> StaticAgent:
    if not isinstance(value, dict):
        raise AgentsError(where, f"a {type(value).__name__}", "a mapping: address, switch, ports, sub_agent")
    unknown = sorted(set(value) - {"address", "switch", "ports", "sub_agent"})
    if unknown:
        raise AgentsError(f"{where}.{str(unknown[0])[:64]}", "unknown key", "address, switch, ports, sub_agent")
    try:
        address = str(ipaddress.ip_address(str(value.get("address"))))
    except ValueError:
        raise AgentsError(f"{where}.address", f"{str(value.get('address'))[:64]!r}", "an IP address") from None
    switch = value.get("switch")
    if switch not in fabric.switches:
        raise AgentsError(f"{where}.switch", f"{str(switch)[:64]!r} is not a switch of {fabric.spec.name}")
    sub_agent = value.get("sub_agent", 0)
    if not isinstance(sub_agent, int) or isinstance(sub_agent, bool) or not 0 <= sub_agent < 1 << 32:
        raise AgentsError(f"{where}.sub_agent", f"{sub_agent!r}", "an integer 0 to 4294967295")
    ports = value.get("ports")
    if not isinstance(ports, dict) or not ports:
        raise AgentsError(f"{where}.ports", f"{ports!r}"[:64], "a mapping of ifIndex to the spec's port number")
    known = fabric.ports(switch)
    for if_index, port in ports.items():
        if not isinstance(if_index, int) or isinstance(if_index, bool) or not 0 < if_index < 1 << 30:
            raise AgentsError(f"{where}.ports", f"ifIndex {if_index!r}"[:64], "integers 1 to 2^30 - 1")
        if port not in known:
            raise AgentsError(f"{where}.ports.{if_index}", f"{port!r}"[:64], f"a port of {switch}: {sorted(known)}")
    return StaticAgent(address, switch, dict(ports), sub_agent)
