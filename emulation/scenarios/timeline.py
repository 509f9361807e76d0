"""TE's decisions over a run, read back from the records the controller
writes (`--te-decisions`: one JSON object per decision, with the flow, the
link and the old and new via as fields), and the figures made of them:
collision-to-fix, moves and path changes per flow. Pure but for
`read_decisions`.

Collision-to-fix, per collision: from its onset to the commit that removes it.
- Detected: the engine's `collision` decision for the uplink.
- Onset: the first sample of the runner's own port telemetry (every 0.25 s,
  independent of the controller) in which that uplink runs full, not before
  the last change that could have made the collision: traffic or a flow
  starting, a scenario event, a committed move onto that uplink, the end of
  the uplink's previous collision. Never later than the detection.
- Fixed: the first move after the detection that takes a flow off the
  uplink, plus the commit latency (decision to bundle committed on the
  switches). The controller exports that latency only as a histogram, so
  its mean stands for every move's; without it, the decision time.
A collision that no move ever relieves is counted as unfixed, not timed.
"""

from __future__ import annotations

import bisect
import json
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from controller.fabric import Endpoint, Fabric, FabricError, NicId
from controller.fabric import addressing as ad
from controller.te.engine import Decision, DecisionKind
from emulation.model.stats import percentile
from emulation.scenarios.records import CollisionToFix, Episode, PerFlow, TeFigures

SATURATED = 0.9  # of capacity: an uplink carrying a collision runs full
MOVES = (DecisionKind.REROUTE, DecisionKind.REVERT)  # decisions that rewrite a flow's entries


@dataclass(frozen=True)
class Decided:
    """A decision of the run, and when: seconds since traffic started."""

    decision: Decision
    at_s: float

    @property
    def kind(self) -> DecisionKind:
        return self.decision.kind

    @property
    def subject(self) -> str:
        return self.decision.subject

    @property
    def vias(self) -> tuple[str, str] | None:
        """(old, new) of a move ("" for an old via TE did not know)."""
        d = self.decision
        return None if d.to_via is None else (d.from_via or "", d.to_via)

    @property
    def nics(self) -> tuple[NicId, NicId] | None:
        """The flow's NICs, for a decision about a flow of this fabric."""
        flow = self.decision.flow
        if flow is None:
            return None
        try:
            return ad.parse_nic_address(flow[0]), ad.parse_nic_address(flow[1])
        except ad.AddressError:
            return None


def changed_path(d: Decided) -> bool:
    """A move that put its flow on another path (not a pin where it is)."""
    return d.kind in MOVES and (v := d.vias) is not None and v[0] != v[1]


def read_decisions(path: Path, started_at: float) -> list[Decided]:
    """Every decision the run's controller wrote to `path`, in order, timed
    from `started_at` (wall clock, the traffic's start); none if it wrote
    none. One made before it, while the jobs' connections warmed up, counts
    at 0: its move holds into the run."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    decisions = [Decision.from_record(json.loads(line)) for line in lines if line.strip()]
    return [Decided(d, max(0.0, d.at - started_at)) for d in decisions]


def episodes(
    fabric: Fabric,
    decisions: Sequence[Decided],
    samples: Sequence[tuple[float, Mapping[Endpoint, float]]],
    changes_s: Sequence[float],
    commit_s: float | None,
) -> list[Episode]:
    """Every collision the engine reported. `samples`: (seconds since start,
    bps per egress); `changes_s`: when traffic or the fabric changed (flow
    starts, scenario events)."""
    commit = commit_s or 0.0
    moves = [(d, d.nics, d.vias) for d in decisions if d.kind in MOVES]
    out: list[Episode] = []
    last_end: dict[str, float] = {}
    for d in decisions:
        if d.kind != DecisionKind.COLLISION:
            continue
        uplink = _endpoint(d.decision.link or "")
        if uplink is None:
            continue
        onto = [
            m.at_s + commit
            for m, flow, vias in moves
            if flow and vias and m.at_s + commit <= d.at_s and _crosses(fabric, flow, vias[1], uplink)
        ]
        floor = max([0.0, *(t for t in changes_s if t <= d.at_s), *onto, last_end.get(d.subject, 0.0)])
        capacity = fabric.link_at(uplink).emulated_bps
        full = [t for t, tx in samples if floor <= t <= d.at_s and tx.get(uplink, 0.0) >= SATURATED * capacity]
        onset = min(full, default=d.at_s)
        fixed = next(
            (
                m.at_s + commit
                for m, flow, vias in moves
                if m.at_s >= d.at_s
                and flow
                and vias
                and _crosses(fabric, flow, vias[0], uplink)
                and not _crosses(fabric, flow, vias[1], uplink)
            ),
            None,
        )
        out.append(Episode(d.subject, onset_s=onset, detected_s=d.at_s, fixed_s=fixed))
        last_end[d.subject] = fixed if fixed is not None else d.at_s
    return out


SETTLE_S = 2.0  # after a change of traffic or links, TE's moves are the reaction to it


def in_steady_traffic(at_s: float, changes_s: Sequence[float]) -> bool:
    """More than SETTLE_S after the last change of traffic or links before
    `at_s`: a move then is churn that steady traffic must not cause."""
    return at_s > max((c for c in changes_s if c <= at_s), default=0.0) + SETTLE_S


def te_figures(
    fabric: Fabric,
    decisions: Sequence[Decided],
    samples: Sequence[tuple[float, Mapping[Endpoint, float]]],
    changes_s: Sequence[float],
    commit_s: float | None,
    n_flows: int,
) -> TeFigures:
    found = episodes(fabric, decisions, samples, changes_s, commit_s)
    times = sorted(e.to_fix_s for e in found if e.to_fix_s is not None)
    moves = Counter(d.subject for d in decisions if d.kind in MOVES)
    changes = Counter(d.subject for d in decisions if changed_path(d))
    moved_at = sorted(d.at_s for d in decisions if d.kind in MOVES)
    return TeFigures(
        last_move_s=moved_at[-1] if moved_at else None,
        moves_in_steady_traffic=sum(in_steady_traffic(at, changes_s) for at in moved_at),
        collision_to_fix_s=CollisionToFix(
            median=statistics.median(times) if times else None,
            p99=percentile(times, 0.99) if times else None,
            all=times,
            unfixed=sum(e.fixed_s is None for e in found),
            commit_latency_s=commit_s,
            episodes=found,
        ),
        unfixable_collisions=sum(d.kind == DecisionKind.UNFIXABLE for d in decisions),
        moves_per_flow=_per_flow(moves, n_flows),
        path_changes_per_flow=_per_flow(changes, n_flows),
        path_changes_per_flow_per_change_max=max(
            Counter((d.subject, bisect.bisect_right(changes_s, d.at_s)) for d in decisions if changed_path(d)).values(),
            default=0,
        ),
        returned_to_ecmp=sum(d.kind == DecisionKind.EXPIRE and d.nics is not None for d in decisions),
    )


def _per_flow(counts: Counter[str], n_flows: int) -> PerFlow:
    return PerFlow(mean=sum(counts.values()) / n_flows if n_flows else 0.0, max=max(counts.values(), default=0))


def _endpoint(name: str) -> Endpoint | None:
    switch, _, port = name.rpartition(":")
    return Endpoint(switch, int(port)) if switch and port.isdigit() else None


def _crosses(fabric: Fabric, flow: tuple[NicId, NicId], via: str, uplink: Endpoint) -> bool:
    if not via:
        return False  # where ECMP had it: unknown
    try:
        return uplink in fabric.egress_path(flow[0], flow[1], via)
    except FabricError:
        return False
