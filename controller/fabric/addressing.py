"""The one place that maps fabric coordinates to names, addresses, MACs and dpids.

Everything here is derived from coordinates, never stored, so the controller,
the emulation and a human reading `ovs-ofctl` output always agree:

- NIC (rail r, pod p, server s) = 10.(p>>8 <<4 | r).(p & 255).(s+1)/24,
  gateway .254: below pod 256 simply 10.r.p.(s+1). Rails take the low
  nibble of the second octet and a pod's high bits the high nibble, so one
  formula reads back any address without the spec, up to 16 rails and 4,096
  pods (a third tier's 8 clusters of 252 pods need more than one octet);
- rail r = 10.(h<<4 | r).0.0/16 for each pod block h, leaf (pod p, rail r) a /24;
- every Railyard node name starts with "ry" so cleanup can tell ours from others'
"""

from __future__ import annotations

import functools
import ipaddress
from typing import NamedTuple

from controller.errors import RailyardError, Status

NAME_PREFIX = "ry"
GATEWAY_HOST = 254

# Top 16 bits of a dpid say which tier the switch is in.
TIER_CODES = {"leaf": 1, "spine": 2, "agg": 3, "core": 4}

# The address layout's limits (see the module docstring).
RAIL_LIMIT = 16
POD_LIMIT = 4096


class AddressError(RailyardError):
    """Not an address (or name) of the fabric's scheme."""

    status = Status.INVALID_ARGUMENT


class NicId(NamedTuple):
    """A NIC by (rail, pod, server). A NamedTuple: it is hashed on every path
    and placement lookup, and ordered like the dataclass it replaced."""

    rail: int
    pod: int
    server: int


def _second_octet(rail: int, pod: int) -> int:
    return (pod >> 8) << 4 | rail


def nic_address(nic: NicId) -> ipaddress.IPv4Address:
    # From the integer: parsing a dotted string costs 10x more, and this runs per flow.
    octet = _second_octet(nic.rail, nic.pod)
    return ipaddress.IPv4Address(10 << 24 | octet << 16 | (nic.pod & 0xFF) << 8 | (nic.server + 1))


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
    first, octet, pod_low, host = ip.packed
    if first != 10 or not 1 <= host < GATEWAY_HOST:
        raise AddressError(f"{ip} is not a fabric NIC address (10.<pod/16*16 + rail>.<pod%256>.<1..253>)")
    return NicId(rail=octet & 0xF, pod=(octet >> 4) << 8 | pod_low, server=host - 1)


def _leaf_octets(rail: int, pod: int) -> str:
    return f"10.{_second_octet(rail, pod)}.{pod & 0xFF}"


def gateway_address(rail: int, pod: int) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(f"{_leaf_octets(rail, pod)}.{GATEWAY_HOST}")


def rail_prefixes(rail: int, pods: int) -> tuple[ipaddress.IPv4Network, ...]:
    """Rail r of a fabric of `pods` pods: one /16 per block of 256 pods."""
    return tuple(
        ipaddress.IPv4Network(f"10.{_second_octet(rail, block << 8)}.0.0/16") for block in range((pods + 255) // 256)
    )


def leaf_prefix(rail: int, pod: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"{_leaf_octets(rail, pod)}.0/24")


def nic_mac(nic: NicId) -> str:
    # 02: locally administered; 0x52 = 'R'. A server index fits one octet
    # (at most 253), so the fifth carries the pod's high bits: 0 below pod 256.
    return f"02:52:{nic.rail:02x}:{nic.pod & 0xFF:02x}:{nic.pod >> 8:02x}:{nic.server:02x}"


def gateway_mac(rail: int, pod: int) -> str:
    # ff:fe below pod 256; a NIC's fifth octet never exceeds 0x0f, so 0xff - high never collides.
    return f"02:52:{rail:02x}:{pod & 0xFF:02x}:{0xFF - (pod >> 8):02x}:fe"


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


def cluster_spine_name(cluster: int, index: int) -> str:
    """Spine `index` of a three-tier fabric's cluster."""
    return f"{NAME_PREFIX}c{cluster}s{index}"


def core_name(index: int) -> str:
    """A core switch of a three-tier fabric: it joins the clusters."""
    return f"{NAME_PREFIX}k{index}"


def cluster_group_name(cluster: int) -> str:
    """A three-tier fabric's cluster (its leaves and spines) as one locality domain."""
    return f"{NAME_PREFIX}c{cluster}"


def edge_name(pod: int, index: int) -> str:
    """A fat tree's edge switch (the leaf tier of that builder)."""
    return f"{NAME_PREFIX}e{pod}x{index}"


def agg_name(pod: int, index: int) -> str:
    return f"{NAME_PREFIX}a{pod}x{index}"


def switch_port_name(switch: str, port: int) -> str:
    return f"{switch}-p{port}"


def dpid(tier: str, pod: int, rail: int, index: int) -> int:
    """Leaves carry their pod and rail, a cluster's spines their cluster in the pod field."""
    return (TIER_CODES[tier] << 48) | (pod << 32) | (rail << 16) | index


def parse_dpid(value: int) -> tuple[str, int, int, int]:
    """Inverse of dpid: (tier, pod, rail, index)."""
    code = value >> 48
    tier = next((name for name, c in TIER_CODES.items() if c == code), None)
    if tier is None:
        raise AddressError(f"dpid {value:016x} has no Railyard tier code in its top 16 bits")
    return tier, value >> 32 & 0xFFFF, value >> 16 & 0xFFFF, value & 0xFFFF


def dpid_hex(value: int) -> str:
    return f"{value:016x}"
