"""Rebalancing: the fewest elephant moves that bring spine-tier links back
under capacity, with hysteresis and a minimum gain so noisy telemetry cannot
make flows flap; elephants on dead links move first. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from controller.fabric import Endpoint, Fabric, NicId
from controller.te.engine.state import Decision, DecisionKind, Elephant, EngineConfig, Move, describe_flow
from controller.te.jobs import Drains, JobFlow
from controller.te.load import drained
from controller.te.paths import Layer, assign_greedy, candidate_vias
from controller.te.view import FlowKey


def rebalance(
    fabric: Fabric,
    drains: Drains,
    elephants: list[Elephant],
    background: Mapping[Endpoint, float],
    moves: dict[FlowKey, Move],
    now: float,
    cfg: EngineConfig,
    steered: frozenset[tuple[NicId, NicId]] = frozenset(),
) -> list[Decision]:
    """Starts from where the elephants are and moves as few as it takes: while
    a spine-tier link is over capacity by the elephants' demands, move the
    flow whose move lowers its own bottleneck most (by at least min_gain),
    off the hottest link that can be fixed. Updates `moves`; returns the reroutes."""
    layer = Layer(fabric, background)
    via: dict[FlowKey, str] = {}
    unknown = []
    for e in elephants:
        if e.via:
            via[e.key] = e.via
            layer.add(fabric.egress_path(e.src, e.dst, e.via), e.demand_bps)
        else:
            unknown.append(e)
    if unknown:  # the switches did not say where these are: place them min-max
        placed, _ = assign_greedy(fabric, drains, layer, [JobFlow(e.src, e.dst, e.demand_bps) for e in unknown])
        for e, flow in zip(unknown, placed):
            via[e.key] = flow.via
            layer.add(fabric.egress_path(e.src, e.dst, flow.via), e.demand_bps)
    capacity = fabric.capacity_bps
    decisions = []
    movable = [e for e in elephants if (e.src, e.dst) not in steered]
    for e in movable:  # off dead links first: any live path beats none
        old = fabric.egress_path(e.src, e.dst, via[e.key])
        if not drained(fabric, drains, old):
            if e.key[2] == "tcp" and e.key not in moves and _acks_may_die(fabric, drains, e, via[e.key]):
                # The data path survived (the ingress leaf failed over) but the
                # ACKs hash on their own and may cross the dead link: pinning
                # the flow where it is also steers its ACKs back the same way.
                moves[e.key] = Move(e.key, e.src, e.dst, via[e.key], now, now)
                decisions.append(
                    Decision(
                        DecisionKind.REROUTE,
                        describe_flow(e.key),
                        f"ACKs pinned via {via[e.key]}: their hashed path may cross a dead link",
                        now,
                    )
                )
            continue
        live = candidate_vias(fabric, drains, e.src, e.dst)
        if not live:
            continue
        other = min(live, key=lambda v: (layer.peak(fabric.egress_path(e.src, e.dst, v), e.demand_bps), v))
        new = fabric.egress_path(e.src, e.dst, other)
        layer.add(old, -e.demand_bps)
        layer.add(new, e.demand_bps)
        decisions.append(
            Decision(DecisionKind.REROUTE, describe_flow(e.key), f"{via[e.key]} -> {other}: path down", now)
        )
        via[e.key] = other
        moves[e.key] = Move(e.key, e.src, e.dst, other, now, now)
    for _ in range(cfg.max_moves_per_cycle):
        hot = sorted(
            (
                x
                for x in layer.added
                if x.port and not fabric.link_at(x).is_access and layer.bps(x) > capacity[x] * (1 + 1e-9)
            ),
            key=lambda x: -layer.bps(x) / capacity[x],
        )
        best = None
        for link in hot:
            for e in movable:
                if e.key in moves and now - moves[e.key].moved_at < cfg.hysteresis_s:
                    continue
                old = fabric.egress_path(e.src, e.dst, via[e.key])
                if link not in old:
                    continue
                for other in candidate_vias(fabric, drains, e.src, e.dst):
                    if other == via[e.key]:
                        continue
                    new = fabric.egress_path(e.src, e.dst, other)
                    only_old = [x for x in old if x not in new]
                    only_new = [x for x in new if x not in old]
                    gain = layer.peak(only_old) - layer.peak(only_new, e.demand_bps)
                    if gain >= cfg.min_gain and (best is None or gain > best[0]):
                        best = (gain, e, other, old, new)
            if best is not None:
                break
        if best is None:
            break
        gain, e, other, old, new = best
        layer.add(old, -e.demand_bps)
        layer.add(new, e.demand_bps)
        decisions.append(
            Decision(
                DecisionKind.REROUTE,
                describe_flow(e.key),
                f"{via[e.key]} -> {other}: its bottleneck -{gain:.2f} of capacity "
                f"(demand {e.demand_bps / 1e9:.0f} Gb/s, measured {e.rate_bps / 1e9:.0f})",
                now,
            )
        )
        via[e.key] = other
        moves[e.key] = Move(e.key, e.src, e.dst, other, now, now)
    return decisions


def _acks_may_die(fabric: Fabric, drains: Drains, e: Elephant, via: str) -> bool:
    reverse_ok = fabric.egress_path(e.dst, e.src, via)
    return not drained(fabric, drains, reverse_ok) and any(
        drained(fabric, drains, fabric.egress_path(e.dst, e.src, v)) for v in fabric.vias(e.dst, e.src)
    )
