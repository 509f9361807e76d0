"""The underlay: what a BGP-ECMP fabric would forward with no controller.

Pure: Fabric -> per-switch select groups and routes. One computation for
both who install it: the emulation (ovs-ofctl, cookie 0: emulation/net/
underlay.py renders it) and the controller (`controller run --underlay`:
OpenFlow entries with the underlay's own cookie owner, reconciled like the
overlay by underlay_sync.py). Every route sits below Railyard's overlay band,
so the controller steers on top of it and, if the controller dies, traffic
falls back to plain 5-tuple ECMP instead of being black-holed.

- host route (/32) to each attached NIC: rewrite MACs like a router's last hop;
- a route per remote leaf prefix (/24), or per NIC (/32) where a prefix does
  not sit behind one leaf (fat tree pods), to a single port or, over the
  equal-cost next hops, to one of (`Ecmp`):
  - an OpenFlow `select` group: any OpenFlow 1.3 switch. OpenFlow 1.3 cannot
    say how it hashes; Open vSwitch then picks by `dp_hash` in a second
    datapath pass, where neither its flow table nor its sFlow samples show
    the port a flow left by, so TE cannot see the uplinks it must steer
    between (the emulation sets the spec's hash over OpenFlow 1.5 instead);
  - Open vSwitch's `bundle` action (a Nicira extension that OpenFlow 1.3
    carries): the 5-tuple hashed, highest random weight, over the live ports,
    in the same pass that outputs, so flow records and sFlow see the port.
"""

from __future__ import annotations

import enum
import ipaddress
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from controller.fabric import Fabric, NicId, Tier
from controller.fabric import addressing as ad
from controller.southbound.overlay import IPV4, EntryKey, OverlayEntry, owner_cookie
from controller.te.headroom import hashed_ports

PRIORITY_LOCAL_HOST = 3000
PRIORITY_REMOTE_HOST = 2000
PRIORITY_REMOTE_PREFIX = 1000

# The fields a BGP-ECMP ASIC hashes. OVS skips a field whose prerequisites a
# packet does not meet, so TCP and UDP (RoCEv2 on 4791) both hash on ports.
HASH_FIELDS = ("ip_src", "ip_dst", "ip_proto", "tcp_src", "tcp_dst", "udp_src", "udp_dst")

# The select groups' hash basis (selection_method_param) by tier. A switch
# above the leaf that hashed the same fields with the leaf's basis would
# score its buckets in the leaf's order, so a flow's second choice would
# follow its first and most upper-tier links would idle (polarisation).
# Fabrics seed each tier's hash differently; so does this one.
UPPER_TIER_HASH_PARAM = 0x5241494C  # "RAIL"

# Railyard's underlay group ids: only groups in this range are read, changed
# or deleted by the controller (as meters have theirs).
GROUP_ID_BASE = 0x52590000
GROUP_ID_SPAN = 1 << 16

# The controller's underlay entries carry this cookie: its own owner kind, so
# overlay passes never see them and underlay passes see nothing else.
UNDERLAY_COOKIE = owner_cookie("underlay", "underlay")


class Ecmp(str, enum.Enum):
    """How a switch spreads a route over its equal-cost next hops."""

    GROUP = "group"  # OpenFlow select groups, hashed as the switch is configured to
    OVS_BUNDLE = "ovs-bundle"  # Open vSwitch's bundle action, hashed where it outputs


def hash_param(tier: Tier) -> int:
    return 0 if tier is Tier.LEAF else UPPER_TIER_HASH_PARAM


def bundle_action(tier: Tier, ports: tuple[int, ...]) -> str:
    """The canonical `bundle` action over `ports`: the bundle's basis is 16
    bits, the tier's hash basis cut to them."""
    return f"bundle:{hash_param(tier) & 0xFFFF}:{','.join(str(p) for p in ports)}"


def is_underlay_group(group_id: int) -> bool:
    return GROUP_ID_BASE <= group_id < GROUP_ID_BASE + GROUP_ID_SPAN


@dataclass(frozen=True)
class SelectGroup:
    group_id: int
    ports: tuple[int, ...]
    param: int = 0  # selection_method_param: the hash basis


@dataclass(frozen=True)
class Route:
    priority: int
    destination: ipaddress.IPv4Network  # a /24 leaf prefix or a /32 NIC
    actions: tuple[str, ...]  # canonical, as overlay entries: dec_ttl, set_field:F=V, output:N, group:N


@dataclass(frozen=True)
class SwitchUnderlay:
    switch: str
    groups: tuple[SelectGroup, ...]
    routes: tuple[Route, ...]


def build_underlay(
    fabric: Fabric, ecmp: Ecmp = Ecmp.GROUP, reserved: Mapping[str, frozenset[int]] | None = None
) -> dict[str, SwitchUnderlay]:
    """Every switch's routes and groups. `reserved` (switch -> ports, from
    controller/te/headroom.py): ports a placed job fills, left out of the
    hash for the traffic that reaches the underlay."""
    return {name: _switch_underlay(fabric, name, ecmp, reserved or {}) for name in sorted(fabric.switches)}


def _deliver_locally(nic: NicId, port: int) -> tuple[str, ...]:
    eth_src, eth_dst = ad.local_delivery_macs(nic)
    return ("dec_ttl", f"set_field:eth_src={eth_src}", f"set_field:eth_dst={eth_dst}", f"output:{port}")


def _switch_underlay(fabric: Fabric, switch: str, ecmp: Ecmp, reserved: Mapping[str, frozenset[int]]) -> SwitchUnderlay:
    local = fabric.local_nics(switch)
    routes = [
        Route(PRIORITY_LOCAL_HOST, ipaddress.IPv4Network(f"{ad.nic_address(nic)}/32"), _deliver_locally(nic, port))
        for port, nic in sorted(local.items())
    ]
    local_set = set(local.values())

    # Destinations grouped by leaf prefix: one /24 route when the whole prefix
    # shares one ECMP set here, else /32 routes (a fat-tree pod spans edges).
    by_prefix: dict[tuple[int, int], list[tuple[NicId, tuple[int, ...]]]] = defaultdict(list)
    for nic in fabric.nics:
        if nic in local_set:
            continue
        hops = fabric.next_hops(switch, nic)
        if hops:
            by_prefix[(nic.rail, nic.pod)].append((nic, hops))

    groups: dict[tuple[int, ...], SelectGroup] = {}
    tier = fabric.switch(switch).tier
    param = hash_param(tier)

    def forward(next_hops: tuple[int, ...]) -> tuple[str, ...]:
        hops = hashed_ports(switch, next_hops, reserved)
        if len(hops) == 1:
            return ("dec_ttl", f"output:{hops[0]}")
        if ecmp is Ecmp.OVS_BUNDLE:
            return ("dec_ttl", bundle_action(tier, hops))
        if hops not in groups:
            groups[hops] = SelectGroup(GROUP_ID_BASE + len(groups) + 1, hops, param)
        return ("dec_ttl", f"group:{groups[hops].group_id}")

    for (rail, pod), members in sorted(by_prefix.items()):
        hop_sets = {hops for _, hops in members}
        covers_prefix = len(members) == sum(1 for n in fabric.nics if (n.rail, n.pod) == (rail, pod))
        if len(hop_sets) == 1 and covers_prefix:
            routes.append(Route(PRIORITY_REMOTE_PREFIX, ad.leaf_prefix(rail, pod), forward(members[0][1])))
        else:
            for nic, hops in members:
                destination = ipaddress.IPv4Network(f"{ad.nic_address(nic)}/32")
                routes.append(Route(PRIORITY_REMOTE_HOST, destination, forward(hops)))
    return SwitchUnderlay(switch, tuple(groups.values()), tuple(routes))


def route_match(route: Route) -> tuple[tuple[str, int | str], ...]:
    """The route's match as a switch reports it: a /32 as an exact address, a prefix as address/netmask."""
    net = route.destination
    value = str(net.network_address) if net.prefixlen == 32 else f"{net.network_address}/{net.netmask}"
    return (("eth_type", IPV4), ("ipv4_dst", value))


def underlay_entries(table: SwitchUnderlay) -> dict[EntryKey, OverlayEntry]:
    """The controller's OpenFlow entries for one switch's routes, keyed as a dump keys them."""
    entries = (OverlayEntry(table.switch, r.priority, route_match(r), r.actions, UNDERLAY_COOKIE) for r in table.routes)
    return {e.key: e for e in entries}
