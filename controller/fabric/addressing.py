"""The one place that maps fabric coordinates to names, addresses, MACs and dpids.

Everything here is derived from coordinates, never stored, so the controller,
the emulation and a human reading `ovs-ofctl` output always agree:

- NIC (rail r, pod p, server s) = 10.r.p.(s+1)/24, gateway 10.r.p.254
- rail r = 10.r.0.0/16, leaf (pod p, rail r) = 10.r.p.0/24
- every Railyard node name starts with "ry" so cleanup can tell ours from others'
"""

from __future__ import annotations

import functools
import ipaddress
from typing import NamedTuple

NAME_PREFIX = "ry"
GATEWAY_HOST = 254

# Top 16 bits of a dpid say which tier the switch is in.
TIER_CODES = {"leaf": 1, "spine": 2, "agg": 3}


class AddressError(ValueError):
    pass


class NicId(NamedTuple):
    """A NIC by (rail, pod, server). A NamedTuple: it is hashed on every path
    and placement lookup, and ordered like the dataclass it replaced."""

    rail: int
    pod: int
    server: int


def nic_address(nic: NicId) -> ipaddress.IPv4Address:
    # From the integer: parsing a dotted string costs 10x more, and this runs per flow.
    return ipaddress.IPv4Address(10 << 24 | nic.rail << 16 | nic.pod << 8 | (nic.server + 1))


@functools.lru_cache(maxsize=1 << 17)
def nic_ip(nic: NicId) -> str:
    """nic_address as text, memoised: every flow record and API reply formats these."""
    return str(nic_address(nic))


def parse_nic_address(address: str | ipaddress.IPv4Address) -> NicId:
    """Inverse of nic_address; rejects anything that is not a NIC address."""
    try:
        ip = ipaddress.IPv4Address(str(address))
    except ipaddress.AddressValueError as exc:
        raise AddressError(f"not an IPv4 address: {address!r}") from exc
    first, rail, pod, host = ip.packed
    if first != 10 or not 1 <= host < GATEWAY_HOST:
        raise AddressError(f"{ip} is not a fabric NIC address (10.<rail>.<pod>.<1..253>)")
    return NicId(rail=rail, pod=pod, server=host - 1)


def gateway_address(rail: int, pod: int) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(f"10.{rail}.{pod}.{GATEWAY_HOST}")


def rail_prefix(rail: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"10.{rail}.0.0/16")


def leaf_prefix(rail: int, pod: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"10.{rail}.{pod}.0/24")


def nic_mac(nic: NicId) -> str:
    # 02: locally administered; 0x52 = 'R'
    return f"02:52:{nic.rail:02x}:{nic.pod:02x}:{nic.server >> 8:02x}:{nic.server & 0xFF:02x}"


def gateway_mac(rail: int, pod: int) -> str:
    return f"02:52:{rail:02x}:{pod:02x}:ff:fe"


def local_delivery_macs(nic: NicId) -> tuple[str, str]:
    """(eth_src, eth_dst) a leaf writes when it routes a packet to a NIC cabled to it."""
    return gateway_mac(nic.rail, nic.pod), nic_mac(nic)


def server_name(pod: int, server: int) -> str:
    return f"{NAME_PREFIX}h{pod}s{server}"


def nic_name(nic: NicId) -> str:
    """Interface name of the NIC inside its server (also its graph node)."""
    return f"{server_name(nic.pod, nic.server)}-r{nic.rail}"


def leaf_name(pod: int, rail: int) -> str:
    return f"{NAME_PREFIX}l{pod}r{rail}"


def leaf_group_name(pod: int) -> str:
    """A rail-optimized pod's rail leaves, as one locality domain (every
    server of the pod connects to each of them): scheduler exports."""
    return f"{NAME_PREFIX}l{pod}"


def pod_block_name(pod: int) -> str:
    """A fat tree's pod (its edge and aggregation switches) as one locality domain."""
    return f"{NAME_PREFIX}p{pod}"


def spine_name(index: int, plane: int | None = None) -> str:
    return f"{NAME_PREFIX}s{index}" if plane is None else f"{NAME_PREFIX}r{plane}s{index}"


def edge_name(pod: int, index: int) -> str:
    """A fat tree's edge switch (the leaf tier of that builder)."""
    return f"{NAME_PREFIX}e{pod}x{index}"


def agg_name(pod: int, index: int) -> str:
    return f"{NAME_PREFIX}a{pod}x{index}"


def switch_port_name(switch: str, port: int) -> str:
    return f"{switch}-p{port}"


def dpid(tier: str, pod: int, rail: int, index: int) -> int:
    return (TIER_CODES[tier] << 48) | (pod << 32) | (rail << 16) | index


def dpid_hex(value: int) -> str:
    return f"{value:016x}"
