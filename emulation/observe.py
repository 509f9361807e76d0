"""Observing the emulated fabric from outside: port counters and the switches' own ECMP choice."""

from __future__ import annotations

from dataclasses import dataclass

from controller.fabric import Endpoint, Fabric
from emulation import ovs
from emulation.traffic import FlowSpec


@dataclass(frozen=True)
class PortCounters:
    tx_bytes: int
    rx_bytes: int
    tx_packets: int
    rx_packets: int
    tx_dropped: int

    def __sub__(self, other: "PortCounters") -> "PortCounters":
        return PortCounters(
            self.tx_bytes - other.tx_bytes,
            self.rx_bytes - other.rx_bytes,
            self.tx_packets - other.tx_packets,
            self.rx_packets - other.rx_packets,
            self.tx_dropped - other.tx_dropped,
        )


def port_counters(fabric: Fabric) -> dict[Endpoint, PortCounters]:
    """Live counters of every switch port of the fabric, as the switches report them."""
    counters = {}
    for name in fabric.switches:
        for port, s in ovs.port_stats(name).items():
            counters[Endpoint(name, port)] = PortCounters(
                s.tx_bytes, s.rx_bytes, s.tx_packets, s.rx_packets, s.tx_dropped
            )
    return counters


def counter_delta(before: dict[Endpoint, PortCounters], after: dict[Endpoint, PortCounters]) -> dict[Endpoint, PortCounters]:
    return {port: after[port] - before[port] for port in after if port in before}


def ecmp_uplink(fabric: Fabric, flow: FlowSpec) -> Endpoint | None:
    """The port the source leaf sends `flow` out of, asked of the switch itself."""
    attach = fabric.attachment(flow.src)
    port = ovs.trace_output_port(attach.node, flow.ofproto_flow(attach.port))
    return None if port is None else Endpoint(attach.node, port)
