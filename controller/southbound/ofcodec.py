"""Canonical overlay entries <-> os-ken OpenFlow 1.3 messages.

Builds and reads messages; never sends them (that is switches.py). Anything
read back from a switch that is not in the canonical vocabulary becomes an
'unknown:' action, which never equals a desired entry, so a Railyard-cookie
entry that was tampered with gets rewritten by the next reconcile.
"""

from __future__ import annotations

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.southbound.overlay import COOKIE_ALL, COOKIE_PREFIX, COOKIE_PREFIX_MASK, OverlayEntry

OVERLAY_TABLE = 0


def _actions(entry: OverlayEntry) -> list:
    actions = []
    for action in entry.actions:
        name, _, arg = action.partition(":")
        if name == "dec_ttl":
            actions.append(parser.OFPActionDecNwTtl())
        elif name == "output":
            actions.append(parser.OFPActionOutput(int(arg)))
        else:
            raise ValueError(f"no OpenFlow encoding for overlay action {action!r}")
    return actions


def add_flow(datapath, entry: OverlayEntry) -> parser.OFPFlowMod:
    """OFPFC_ADD: replaces an entry with the same (priority, match) in place."""
    return parser.OFPFlowMod(
        datapath, cookie=entry.cookie, table_id=OVERLAY_TABLE, command=ofp.OFPFC_ADD,
        priority=entry.priority, match=parser.OFPMatch(**dict(entry.match)),
        instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, _actions(entry))],
    )


def delete_flow(datapath, entry: OverlayEntry) -> parser.OFPFlowMod:
    """Strict delete scoped to the entry's full cookie: never removes anyone else's entry."""
    return parser.OFPFlowMod(
        datapath, cookie=entry.cookie, cookie_mask=COOKIE_ALL, table_id=OVERLAY_TABLE,
        command=ofp.OFPFC_DELETE_STRICT, priority=entry.priority, match=parser.OFPMatch(**dict(entry.match)),
        out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
    )


def overlay_dump_request(datapath) -> parser.OFPFlowStatsRequest:
    return parser.OFPFlowStatsRequest(
        datapath, 0, OVERLAY_TABLE, ofp.OFPP_ANY, ofp.OFPG_ANY, COOKIE_PREFIX, COOKIE_PREFIX_MASK, parser.OFPMatch(),
    )


def _canonical_value(value):
    if isinstance(value, tuple):  # masked field: keep it visible and unequal to any exact match
        return "/".join(str(v) for v in value)
    return value


def entry_from_stats(switch: str, stats) -> OverlayEntry:
    match = tuple(sorted((name, _canonical_value(value)) for name, value in stats.match.items()))
    actions: list[str] = []
    for inst in stats.instructions:
        if isinstance(inst, parser.OFPInstructionActions) and inst.type == ofp.OFPIT_APPLY_ACTIONS:
            for action in inst.actions:
                if isinstance(action, parser.OFPActionDecNwTtl):
                    actions.append("dec_ttl")
                elif isinstance(action, parser.OFPActionOutput):
                    actions.append(f"output:{action.port}")
                else:
                    actions.append(f"unknown:{type(action).__name__}")
        else:
            actions.append(f"unknown:{type(inst).__name__}")
    if stats.idle_timeout or stats.hard_timeout:
        actions.append(f"unknown:timeouts:{stats.idle_timeout}/{stats.hard_timeout}")
    return OverlayEntry(switch, stats.priority, match, tuple(actions), stats.cookie)
