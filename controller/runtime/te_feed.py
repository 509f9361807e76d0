"""TE decisions into the TeService feed, and the advisory metrics.

An adapter, until the TE runner publishes its typed decisions to listeners:
it hears the runner's one log line per decision ("te KIND SUBJECT at T:
REASON", the record the scenario reports read too) and rebuilds the typed
fields the engine's `Decision` is gaining (flow, link, from_via, to_via)
from its subject and reason. When the runner calls listeners with those
decisions, `publish_decision` takes them as they are and this handler goes.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable

from controller.api.te import DecisionFeed, TeEvent
from controller.fabric import Fabric, Tier
from controller.metrics import Metrics
from controller.te.engine import Move
from controller.te.view import FlowKey

RUNNER_LOGGER = "controller.runtime.te_runner"
_LINE = "te %s %s at %.3f: %s"
_FLOW = re.compile(r"^(?P<src>[\d.]+):(?P<sport>\d+)->(?P<dst>[\d.]+):(?P<dport>\d+)/(?P<proto>\w*)$")
_VIAS = re.compile(r"^(\S*) -> (\S+):")
_LINK_KINDS = ("collision", "unfixable", "link-down")


def flow_of(subject: str) -> FlowKey | None:
    m = _FLOW.match(subject)
    if m is None:
        return None
    protocol = "" if m["proto"] == "ip" else m["proto"]
    return m["src"], m["dst"], protocol, int(m["sport"]), int(m["dport"])


def event_of(kind: str, subject: str, reason: str, at: float, programmed: bool) -> TeEvent:
    vias = _VIAS.match(reason)
    return TeEvent(
        kind,
        subject,
        reason,
        at,
        flow=flow_of(subject),
        link=subject if kind in _LINK_KINDS else None,
        from_via=(vias.group(1) or None) if vias else None,
        to_via=vias.group(2) if vias else None,
        programmed=programmed,
    )


class DecisionLog(logging.Handler):
    """Each decision the TE runner logs, published to the feed."""

    def __init__(self, feed: DecisionFeed, programmed: bool) -> None:
        super().__init__(logging.INFO)
        self.feed = feed
        self.programmed = programmed

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg != _LINE or not isinstance(record.args, tuple) or len(record.args) != 4:
            return
        kind, subject, at, reason = record.args
        self.feed.publish(event_of(str(kind), str(subject), str(reason), float(str(at)), self.programmed))

    def attach(self) -> None:
        logging.getLogger(RUNNER_LOGGER).addHandler(self)

    def detach(self) -> None:
        logging.getLogger(RUNNER_LOGGER).removeHandler(self)


def moves_by_via(
    fabric: Fabric, metrics: Metrics, plan: Callable[[], tuple[int, list[Move], list]]
) -> Callable[[], None]:
    """A callback for each change of TE's moves: how many it holds onto each
    via (advisory: recommends), one series per via of the fabric."""
    vias = sorted(name for name, switch in fabric.switches.items() if switch.tier is not Tier.LEAF)

    def update() -> None:
        counts = Counter(m.via for m in plan()[1])
        for via in vias:
            metrics.te_moves_by_via.labels(via).set(counts.get(via, 0))

    return update
