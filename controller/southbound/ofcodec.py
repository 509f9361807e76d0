"""Canonical overlay entries and meters <-> os-ken OpenFlow 1.3 messages.

Builds requests and reads what switches answer; never sends (that is
switches.py). Flow mods, the bulk of what Railyard sends, are packed by
wire.py instead.

Anything read back from a switch that is not in the canonical vocabulary
becomes an 'unknown:' action, which never equals a desired entry, so a
Railyard-cookie entry that was tampered with gets rewritten by the next
reconcile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from os_ken.ofproto import nicira_ext
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.southbound.overlay import (
    COOKIE_PREFIX,
    OVERLAY_COOKIE_MASK,
    OWNER_KIND_MASK,
    OWNER_KINDS,
    OverlayEntry,
    OverlayMeter,
)
from controller.southbound.wire import NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP, OVERLAY_TABLE

if TYPE_CHECKING:  # os-ken's controller module imports half of os-ken; annotations only
    from os_ken.controller.controller import Datapath

Request = TypeVar("Request")
# os-ken's parsed messages and their stats entries carry no types: Any, by name.
Stats = Any


def _railyard_entries(
    request_class: Callable[..., Request],
    datapath: Datapath,
    cookie: int = COOKIE_PREFIX,
    mask: int = OVERLAY_COOKIE_MASK,
) -> Request:
    """A flow-stats-shaped request for the overlay table's Railyard overlay entries only (by default)."""
    return request_class(datapath, 0, OVERLAY_TABLE, ofp.OFPP_ANY, ofp.OFPG_ANY, cookie, mask, parser.OFPMatch())


def underlay_dump_request(datapath: Datapath) -> parser.OFPFlowStatsRequest:
    """The controller's underlay entries only (their owner kind)."""
    return _railyard_entries(
        parser.OFPFlowStatsRequest, datapath, COOKIE_PREFIX | OWNER_KINDS["underlay"] << 40, OWNER_KIND_MASK
    )


def group_dump_request(datapath: Datapath) -> parser.OFPGroupDescStatsRequest:
    return parser.OFPGroupDescStatsRequest(datapath, 0)


# A select group as the switch reports it over OpenFlow 1.3: its type and its
# buckets (watch port, actions). OF1.3 carries no selection method.
GroupShape = tuple[int, tuple[tuple[int, tuple[str, ...]], ...]]


def group_from_stats(stats: Stats) -> GroupShape:
    buckets = tuple((b.watch_port, tuple(_action_names(b.actions))) for b in stats.buckets)
    return stats.type, buckets


def select_group_mod(datapath: Datapath, group_id: int, ports: tuple[int, ...], command: str) -> parser.OFPGroupMod:
    """command: 'add' | 'modify' | 'delete'. Each bucket outputs to its port and watches it."""
    code = {"add": ofp.OFPGC_ADD, "modify": ofp.OFPGC_MODIFY, "delete": ofp.OFPGC_DELETE}[command]
    buckets = (
        []
        if command == "delete"
        else [
            parser.OFPBucket(weight=1, watch_port=p, watch_group=ofp.OFPG_ANY, actions=[parser.OFPActionOutput(p)])
            for p in ports
        ]
    )
    return parser.OFPGroupMod(datapath, code, ofp.OFPGT_SELECT, group_id, buckets)


def select_group_shape(ports: tuple[int, ...]) -> GroupShape:
    return ofp.OFPGT_SELECT, tuple((p, (f"output:{p}",)) for p in ports)


def overlay_dump_request(datapath: Datapath) -> parser.OFPFlowStatsRequest:
    return _railyard_entries(parser.OFPFlowStatsRequest, datapath)


def overlay_count_request(datapath: Datapath) -> parser.OFPAggregateStatsRequest:
    """How many Railyard entries the overlay table holds: one small reply
    whatever the table's size (the periodic audit's cheap check)."""
    return _railyard_entries(parser.OFPAggregateStatsRequest, datapath)


def _canonical_value(value: int | str | tuple[int | str, ...]) -> int | str:
    if isinstance(value, tuple):  # masked field: keep it visible and unequal to any exact match
        return "/".join(str(v) for v in value)
    return value


def entry_from_stats(switch: str, stats: Stats) -> OverlayEntry:
    match = tuple(sorted((name, _canonical_value(value)) for name, value in stats.match.items()))
    meters: list[str] = []
    actions: list[str] = []
    for inst in stats.instructions:
        if isinstance(inst, parser.OFPInstructionMeter):
            meters.append(f"meter:{inst.meter_id}")
        elif isinstance(inst, parser.OFPInstructionActions) and inst.type == ofp.OFPIT_APPLY_ACTIONS:
            actions += _action_names(inst.actions)
        else:
            actions.append(f"unknown:{type(inst).__name__}")
    actions = meters + actions
    if stats.idle_timeout or stats.hard_timeout:
        actions.append(f"unknown:timeouts:{stats.idle_timeout}/{stats.hard_timeout}")
    return OverlayEntry(switch, stats.priority, match, tuple(actions), stats.cookie)


def _action_names(actions: list[Stats]) -> list[str]:
    out: list[str] = []
    for action in actions:
        if isinstance(action, parser.OFPActionDecNwTtl):
            out.append("dec_ttl")
        elif isinstance(action, parser.OFPActionOutput):
            out.append(f"output:{action.port}")
        elif isinstance(action, parser.OFPActionGroup):  # the underlay's ECMP; never the overlay's
            out.append(f"group:{action.group_id}")
        elif isinstance(action, parser.OFPActionSetField) and action.key in ("eth_src", "eth_dst"):
            out.append(f"set_field:{action.key}={action.value}")
        elif isinstance(action, parser.NXActionBundle) and _is_underlay_bundle(action):
            out.append(f"bundle:{action.basis}:{','.join(str(p) for p in action.slaves)}")
        else:
            out.append(f"unknown:{type(action).__name__}")
    return out


def _is_underlay_bundle(action: Stats) -> bool:
    """A bundle as the underlay writes them (wire._bundle); any other is unknown, and replaced."""
    return (action.algorithm, action.fields, action.slave_type, action.ofs_nbits, action.dst) == (
        nicira_ext.NX_BD_ALG_HRW, NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP, nicira_ext.NXM_OF_IN_PORT, 0, 0
    )  # fmt: skip


METER_FLAGS = ofp.OFPMF_KBPS | ofp.OFPMF_BURST


def meter_mod(datapath: Datapath, meter: OverlayMeter, command: str) -> parser.OFPMeterMod:
    """command: 'add' | 'modify' | 'delete'. Meter mods cannot go in a bundle."""
    code = {"add": ofp.OFPMC_ADD, "modify": ofp.OFPMC_MODIFY, "delete": ofp.OFPMC_DELETE}[command]
    bands = [] if command == "delete" else [parser.OFPMeterBandDrop(rate=meter.rate_kbps, burst_size=meter.burst_kbits)]
    return parser.OFPMeterMod(datapath, command=code, flags=METER_FLAGS, meter_id=meter.meter_id, bands=bands)


def meter_dump_request(datapath: Datapath) -> parser.OFPMeterConfigStatsRequest:
    return parser.OFPMeterConfigStatsRequest(datapath, 0, ofp.OFPM_ALL)


def meter_from_stats(switch: str, stats: Stats) -> OverlayMeter:
    """Anything but one kbps drop band with a burst reads as rate -1: never
    equal to a desired meter, so it gets rewritten."""
    bands = stats.bands
    if stats.flags != METER_FLAGS or len(bands) != 1 or not isinstance(bands[0], parser.OFPMeterBandDrop):
        return OverlayMeter(switch, stats.meter_id, -1, -1)
    return OverlayMeter(switch, stats.meter_id, bands[0].rate, bands[0].burst_size)


def error_code(msg: parser.OFPErrorMsg) -> int:
    """The error's code. os-ken parses an experimenter error (OVS's ONF bundle
    errors) with no `code`, the code being its `exp_type`."""
    return int(msg.exp_type if msg.type == ofp.OFPET_EXPERIMENTER else msg.code)
