"""The underlay as the emulation installs it: the controller's computation
(controller/southbound/underlay.py, the one code path) rendered in ovs-ofctl
syntax with cookie 0, the way a fabric's own routing would hold it. Pure.

`railyard fabric up --bare` installs none of it, and the controller
(`controller run --underlay`) installs the same routes and groups instead.
tests/fakes loads the same data into a fake switch as OpenFlow, and asks it
where a packet leaves. Every entry has cookie 0 and a priority below
Railyard's overlay band, so the controller can steer on top of it and, if
the controller dies, traffic falls back to plain 5-tuple ECMP instead of
being black-holed.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from controller.fabric import Fabric
from controller.southbound import underlay
from controller.southbound.underlay import (  # noqa: F401  (the emulation's and the simulator's names)
    HASH_FIELDS,
    PRIORITY_LOCAL_HOST,
    PRIORITY_REMOTE_HOST,
    PRIORITY_REMOTE_PREFIX,
    UPPER_TIER_HASH_PARAM,
    hash_param,
)


@dataclass(frozen=True)
class SelectGroup(underlay.SelectGroup):
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


def _flow(route: underlay.Route) -> FlowEntry:
    return FlowEntry(route.priority, route.destination, route.actions)


def build_underlay(fabric: Fabric) -> dict[str, SwitchUnderlay]:
    return {
        name: SwitchUnderlay(
            name,
            tuple(SelectGroup(g.group_id, g.ports, g.param) for g in table.groups),
            tuple(_flow(r) for r in table.routes),
        )
        for name, table in underlay.build_underlay(fabric).items()
    }
