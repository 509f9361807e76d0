"""TE decisions into the TeService feed, and the advisory metrics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from controller.api.te import DecisionFeed, TeEvent
from controller.fabric import Fabric, Tier
from controller.metrics import Metrics
from controller.te.engine import Decision, Move


def publisher(feed: DecisionFeed, programmed: bool) -> Callable[[Sequence[Decision]], None]:
    """A TE runner listener (TeRunner.on_decisions) that publishes each
    decision to `feed`; `programmed` False in advisory mode, where the
    switches are not touched."""

    def publish(decisions: Sequence[Decision]) -> None:
        for d in decisions:
            feed.publish(
                TeEvent(
                    d.kind.value,
                    d.subject,
                    d.reason,
                    d.at,
                    flow=d.flow,
                    link=d.link,
                    from_via=d.from_via or None,  # "": TE did not know the path before
                    to_via=d.to_via,
                    programmed=programmed,
                )
            )

    return publish


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
