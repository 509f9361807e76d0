"""Where a packet leaves: the fake switches' tables, walked.

A fake switch's table holds what reached it as OpenFlow: the underlay
(loaded here from emulation/net/underlay.py as flow and select-group mods,
cookie 0) and Railyard's overlay (the reconciler's bundles). `egress` looks a
packet up as OpenFlow 1.3 does (the highest-priority entry whose every match
field matches; masked fields under their mask) and reads the entry with the
controller's own codec (ofcodec.entry_from_stats) to say what it does: the
ports it may leave by (a select group's every bucket: the hash picks one), and
its other actions. `routes` follows a packet across the
fabric's links along every such branch, to the NIC it reaches, as Faucet's
FakeOFNetwork.is_output walks its tables.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.fabric import Endpoint, Fabric
from controller.fabric import addressing as ad
from controller.southbound import ofcodec
from emulation.net.underlay import SwitchUnderlay
from tests.fakes.fake_switch import FakeDatapath, FakeSwitch

IP_PROTOCOLS = {"tcp": 6, "udp": 17}
MAX_HOPS = 8  # more is a forwarding loop


@dataclass(frozen=True)
class Packet:
    """The header fields the tables match."""

    ip_src: str
    ip_dst: str
    protocol: str = "tcp"
    src_port: int = 0
    dst_port: int = 0

    def fields(self) -> dict[str, Any]:
        """As OXM fields (OpenFlow's names), prerequisites included."""
        proto = IP_PROTOCOLS[self.protocol]
        return {
            "eth_type": 0x0800,
            "ipv4_src": self.ip_src,
            "ipv4_dst": self.ip_dst,
            "ip_proto": proto,
            f"{self.protocol}_src": self.src_port,
            f"{self.protocol}_dst": self.dst_port,
        }

    def reversed(self) -> Packet:
        return Packet(self.ip_dst, self.ip_src, self.protocol, self.dst_port, self.src_port)


@dataclass(frozen=True)
class Egress:
    """What one switch does with a packet."""

    ports: tuple[int, ...]  # the ports it may leave by: one, or a select group's buckets
    actions: tuple[str, ...]  # the rest, in the overlay's vocabulary: dec_ttl, set_field:F=V, meter:ID
    cookie: int  # of the entry that matched: 0 is the underlay, Railyard's carry 0x5259 on top


@dataclass(frozen=True)
class Route:
    """One branch of a packet's way through the fabric."""

    hops: tuple[Endpoint, ...]  # each switch egress it left by, in order
    nic: str | None  # the NIC it reached; None: dropped (no entry matched) after the last hop
    last: Egress | None  # the last switch's entry (its MAC rewrite, for delivery)


class ForwardingLoop(AssertionError):
    pass


def _matches(match_fields: Mapping[str, Any], packet: Mapping[str, Any]) -> bool:
    for name, wanted in match_fields.items():
        have = packet.get(name)
        if have is None:
            return False
        if isinstance(wanted, tuple):  # masked: (value, mask)
            value, mask = wanted
            if name.startswith("ipv4_"):
                ip, want, bits = (int(ipaddress.IPv4Address(x)) for x in (have, value, mask))
                if ip & bits != want & bits:
                    return False
            elif have & mask != value & mask:
                return False
        elif have != wanted:
            return False
    return True


def egress(switch: FakeSwitch, packet: Packet) -> Egress | None:
    """The highest-priority matching entry of table 0, applied; None when none matches."""
    fields = packet.fields()
    hits = [
        mod for (table, _, _), mod in switch.flows.items() if table == 0 and _matches(dict(mod.match.items()), fields)
    ]
    if not hits:
        return None
    entry = ofcodec.entry_from_stats(switch.name, max(hits, key=lambda m: m.priority))
    ports: list[int] = []
    for action in entry.actions:
        name, _, arg = action.partition(":")
        if name == "output":
            ports.append(int(arg))
        elif name == "group":
            group = switch.groups[int(arg)]
            ports += [a.port for b in group.buckets for a in b.actions if isinstance(a, parser.OFPActionOutput)]
    others = tuple(a for a in entry.actions if not a.startswith(("output:", "group:")))
    return Egress(tuple(ports), others, entry.cookie)


def routes(fabric: Fabric, switches: Mapping[str, FakeSwitch], packet: Packet) -> list[Route]:
    """Every branch `packet` may take from its source NIC's leaf, in port order."""
    leaf = fabric.attachment(ad.parse_nic_address(packet.ip_src)).node
    return list(_walk(fabric, switches, packet, leaf, ()))


def _walk(
    fabric: Fabric, switches: Mapping[str, FakeSwitch], packet: Packet, at: str, hops: tuple[Endpoint, ...]
) -> Iterator[Route]:
    if len(hops) >= MAX_HOPS:
        raise ForwardingLoop(f"{packet}: {' -> '.join(f'{e.node}:{e.port}' for e in hops)}")
    out = egress(switches[at], packet)
    if out is None or not out.ports:
        yield Route(hops, None, out)
        return
    for port in sorted(out.ports):
        peer = fabric.peer(at, port)
        taken = (*hops, Endpoint(at, port))
        if peer.port == 0:  # a NIC's end of an access link
            yield Route(taken, peer.node, out)
        else:
            yield from _walk(fabric, switches, packet, peer.node, taken)


def install_underlay(switch: FakeSwitch, underlay: SwitchUnderlay) -> None:
    """The underlay's groups and routes, sent to `switch` as OpenFlow (cookie 0,
    outside any bundle), as `ovs-ofctl add-groups/add-flows` sends them."""
    datapath = switch.connect(lambda _dpid, _msg: None)
    for group in underlay.groups:
        buckets = [parser.OFPBucket(watch_port=port, actions=[parser.OFPActionOutput(port)]) for port in group.ports]
        datapath.send_msg(parser.OFPGroupMod(datapath, ofp.OFPGC_ADD, ofp.OFPGT_SELECT, group.group_id, buckets))
    for flow in underlay.flows:
        match = parser.OFPMatch(eth_type=0x0800, ipv4_dst=(str(flow.nw_dst.network_address), str(flow.nw_dst.netmask)))
        actions = [_action(datapath, a) for a in flow.actions]
        datapath.send_msg(
            parser.OFPFlowMod(
                datapath,
                cookie=0,
                priority=flow.priority,
                match=match,
                instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)],
            )
        )
    datapath.close()


def _action(datapath: FakeDatapath, action: str) -> Any:
    name, _, arg = action.partition(":")
    if name == "dec_ttl":
        return parser.OFPActionDecNwTtl()
    if name == "output":
        return parser.OFPActionOutput(int(arg))
    if name == "group":
        return parser.OFPActionGroup(int(arg))
    field, _, value = arg.partition("=")
    return parser.OFPActionSetField(**{field: value})


def fake_fabric(fabric: Fabric, underlay: Mapping[str, SwitchUnderlay]) -> dict[str, FakeSwitch]:
    """A fake switch per switch of the fabric, each holding its underlay."""
    switches = {name: FakeSwitch(name, sw.dpid) for name, sw in fabric.switches.items()}
    for name, switch in switches.items():
        install_underlay(switch, underlay[name])
    return switches
