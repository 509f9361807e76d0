"""What a delivered byte costs on the wire, in the fluid model: each frame's
headers, and a TCP flow's ACKs. Pure.

The shapers count a frame as the kernel holds it (the Ethernet header, no
preamble or FCS), so a 9,000-byte MTU carries 8,948 bytes of a TCP segment
(IPv4 and TCP with timestamps, Linux's default) in 9,014 on the wire; the
receiver sends a 66-byte ACK for every two segments (delayed ACKs). A NIC
that sends one flow and receives another so delivers 98.9% of its rate,
what the emulation measures on a stride (docs/benchmarks.md). Without
framing the simulator read 100% there, and every figure on shapes whose
routing meets the optimum sat about a point above the emulation's.

ACKs are counted where every one of a flow's ACKs must pass, whatever route
it takes: the receiver's NIC and the sender's leaf port to it. In the fabric
between, where a link carries data both ways, they are left out (a few
tenths of a percent of it at most)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from emulation.model.fluid import incidence

ETHERNET_HEADER = 14
IPV4_HEADER = 20
TCP_HEADER = 32  # with the timestamp option
UDP_HEADER = 8
SEGMENTS_PER_ACK = 2
ACK_FRAME = ETHERNET_HEADER + IPV4_HEADER + TCP_HEADER


@dataclass(frozen=True)
class Framing:
    """Wire bytes per delivered byte at one MTU, by transport protocol."""

    mtu: int

    def frame_per_byte(self, protocol: str) -> float:
        """A full frame's bytes on the wire over the payload it carries."""
        transport = TCP_HEADER if protocol == "tcp" else UDP_HEADER
        payload = self.mtu - IPV4_HEADER - transport
        return (self.mtu + ETHERNET_HEADER) / payload

    def ack_per_byte(self, protocol: str) -> float:
        """ACK bytes on the reverse path per delivered byte (none but TCP's)."""
        if protocol != "tcp":
            return 0.0
        return ACK_FRAME / (SEGMENTS_PER_ACK * (self.mtu - IPV4_HEADER - TCP_HEADER))


@dataclass(frozen=True)
class WireCost:
    """Per flow, what its delivered bytes cost on each link it loads: its
    frames on its route, its ACKs on the two NIC ends they always cross.
    ACKs are not shared out as the data is: they are sent as the data
    arrives, so they take their part of a link off the top."""

    frame: np.ndarray  # per flow: wire bytes per delivered byte on its own route
    acks: sp.csr_matrix  # flow x link: ACK bytes per delivered byte

    def framed(self, shares: sp.csr_matrix) -> sp.csr_matrix:
        """The routing's shares (flow x link, in delivered bytes) in the frames they take."""
        return (sp.diags(self.frame) @ shares).tocsr()


def wire_cost(
    framing: Framing, protocols: Sequence[str], ack_egresses: Sequence[tuple[int, int]], links: int
) -> WireCost:
    """`ack_egresses`: per flow, the receiver's NIC transmit side and the
    sender's leaf port to its NIC (egress indices)."""
    frame = np.fromiter((framing.frame_per_byte(p) for p in protocols), dtype=float, count=len(protocols))
    ack = np.fromiter((framing.ack_per_byte(p) for p in protocols), dtype=float, count=len(protocols))
    flows = np.repeat(np.arange(len(protocols)), 2)
    ends = np.asarray(ack_egresses, dtype=np.int64).reshape(-1)
    weight = np.repeat(ack, 2)
    acked = weight > 0
    return WireCost(frame, incidence(flows[acked], ends[acked], weight[acked], len(protocols), links))
