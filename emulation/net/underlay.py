"""The underlay: what a BGP-ECMP fabric would forward with no controller.

Pure: Fabric -> per-switch groups and flow entries, as data (`ofctl()` writes
them in ovs-ofctl syntax for the emulation; tests/fakes loads them into a fake
switch as OpenFlow, and asks it where a packet leaves). Every
entry has cookie 0 and a priority below Railyard's overlay band, so the
controller can steer on top of it and, if the controller dies, traffic falls
back to plain 5-tuple ECMP instead of being black-holed.

- host route (/32) to each attached NIC: rewrite MACs like a router's last hop;
- a route per remote leaf prefix (/24), or per NIC (/32) where a prefix does
  not sit behind one leaf (fat tree pods), to a single port or to an OpenFlow
  `select` group hashing the 5-tuple over the equal-cost next hops.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from dataclasses import dataclass

from controller.fabric import Fabric, NicId, Tier
from controller.fabric import addressing as ad

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


def hash_param(tier: Tier) -> int:
    return 0 if tier is Tier.LEAF else UPPER_TIER_HASH_PARAM


@dataclass(frozen=True)
class SelectGroup:
    group_id: int
    ports: tuple[int, ...]
    param: int = 0  # selection_method_param: the hash basis

    def ofctl(self) -> str:
        # watch_port: a bucket whose port is down is skipped, as a BGP fabric
        # withdraws the routes of a failed uplink; the hash re-spreads over the rest.
        buckets = ",".join(f"bucket=bucket_id:{i},watch_port:{p},actions=output:{p}" for i, p in enumerate(self.ports))
        basis = f",selection_method_param={self.param}" if self.param else ""
        fields = ",".join(HASH_FIELDS)
        return f"group_id={self.group_id},type=select,selection_method=hash{basis},fields({fields}),{buckets}"


@dataclass(frozen=True)
class FlowEntry:
    """An IPv4 route: packets to `nw_dst`, through `actions` in the overlay's
    vocabulary (wire.py): "dec_ttl", "set_field:eth_src=MAC", "output:PORT",
    and "group:ID" (a select group of this switch)."""

    priority: int
    nw_dst: ipaddress.IPv4Network
    actions: tuple[str, ...]

    def ofctl(self) -> str:
        actions = ",".join(_ofctl_action(a) for a in self.actions)
        return f"cookie=0,priority={self.priority},ip,nw_dst={self.nw_dst},actions={actions}"


def _ofctl_action(action: str) -> str:
    name, _, arg = action.partition(":")
    if name == "set_field":
        field, _, value = arg.partition("=")
        return f"set_field:{value}->{field}"
    return action


@dataclass(frozen=True)
class SwitchUnderlay:
    switch: str
    groups: tuple[SelectGroup, ...]
    flows: tuple[FlowEntry, ...]


def build_underlay(fabric: Fabric) -> dict[str, SwitchUnderlay]:
    return {name: _switch_underlay(fabric, name) for name in sorted(fabric.switches)}


def _deliver_locally(nic: NicId, port: int) -> tuple[str, ...]:
    eth_src, eth_dst = ad.local_delivery_macs(nic)
    return ("dec_ttl", f"set_field:eth_src={eth_src}", f"set_field:eth_dst={eth_dst}", f"output:{port}")


def _switch_underlay(fabric: Fabric, switch: str) -> SwitchUnderlay:
    local = fabric.local_nics(switch)
    flows = [
        FlowEntry(PRIORITY_LOCAL_HOST, _host(nic), _deliver_locally(nic, port)) for port, nic in sorted(local.items())
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
    param = hash_param(fabric.switch(switch).tier)

    def forward(hops: tuple[int, ...]) -> tuple[str, ...]:
        if len(hops) == 1:
            return ("dec_ttl", f"output:{hops[0]}")
        if hops not in groups:
            groups[hops] = SelectGroup(len(groups) + 1, hops, param)
        return ("dec_ttl", f"group:{groups[hops].group_id}")

    for (rail, pod), members in sorted(by_prefix.items()):
        hop_sets = {hops for _, hops in members}
        covers_prefix = len(members) == sum(1 for n in fabric.nics if (n.rail, n.pod) == (rail, pod))
        if len(hop_sets) == 1 and covers_prefix:
            flows.append(FlowEntry(PRIORITY_REMOTE_PREFIX, ad.leaf_prefix(rail, pod), forward(members[0][1])))
        else:
            for nic, hops in members:
                flows.append(FlowEntry(PRIORITY_REMOTE_HOST, _host(nic), forward(hops)))
    return SwitchUnderlay(switch, tuple(groups.values()), tuple(flows))


def _host(nic: NicId) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"{ad.nic_address(nic)}/32")
