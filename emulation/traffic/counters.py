"""Observing the emulated fabric from outside: port counters and the switches' own ECMP choice."""

from __future__ import annotations

from controller.fabric import Endpoint, Fabric
from emulation.net import ovs
from emulation.net.ovs import PortStats
from emulation.traffic.iperf import FlowSpec


def port_counters(fabric: Fabric) -> dict[Endpoint, PortStats]:
    """Live counters of every switch port of the fabric, as the switches report them."""
    return {Endpoint(name, port): stats for name in fabric.switches for port, stats in ovs.port_stats(name).items()}


def counter_delta(before: dict[Endpoint, PortStats], after: dict[Endpoint, PortStats]) -> dict[Endpoint, PortStats]:
    return {port: after[port] - before[port] for port in after if port in before}


def ecmp_uplink(fabric: Fabric, flow: FlowSpec) -> Endpoint | None:
    """The port the source leaf sends `flow` out of, asked of the switch itself."""
    attach = fabric.attachment(flow.src)
    port = ovs.trace_output_port(attach.node, flow.ofproto_flow(attach.port))
    return None if port is None else Endpoint(attach.node, port)
