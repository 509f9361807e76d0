"""Scoring candidate server sets for a job, without placing it: what a
scheduler asks before it commits (ScorePlacements). Each candidate is
placed exactly as PlaceJob would place it on those servers (the same paths,
the same prediction), against the same state, and nothing is kept."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from controller.errors import FieldError
from controller.fabric import Fabric
from controller.te.jobs import Job, JobRequest
from controller.te.load import jobs_load
from controller.te.placement import FabricState, NoCapacity, base_loads, place

MAX_CANDIDATES = 64


@dataclass(frozen=True)
class CandidateScore:
    candidate: int  # its index in the request
    job: Job | None  # the placement it would be; None when it cannot be
    reason: str  # why not, when it cannot be
    predicted_max_utilization: float  # the whole fabric with the job there
    spine_tier_peak: float  # the same over the spine tier
    rank: int = 0  # 1 = best

    @property
    def cross_cluster_share(self) -> float:
        """The share of the job's collective demand crossing the core there."""
        return 0.0 if self.job is None else self.job.cross_cluster_share

    @property
    def score(self) -> float:
        """In (0, 1], higher is better; 0 when infeasible. The fabric's
        predicted peak and the spine tier's count alike: a job's own NIC
        links often set the first whatever the servers, and the second is
        what the choice of servers changes."""
        if self.job is None:
            return 0.0
        return 1.0 / (1.0 + self.predicted_max_utilization + self.spine_tier_peak)


def score_candidates(
    fabric: Fabric, state: FabricState, request: JobRequest, candidates: Sequence[tuple[str, ...]], now: float
) -> list[CandidateScore]:
    """One score per candidate, in their order, ranked by score (the
    feasible first), then by the share of demand crossing the core, then by
    their order."""
    base, _, _ = base_loads(fabric, state)
    capacity = fabric.capacity_bps
    spine = set(fabric.spine_tier)
    base_spine_peak = max((base.get(e, 0.0) / capacity[e] for e in spine), default=0.0)
    scores = []
    for index, servers in enumerate(candidates):
        try:
            job = place(fabric, state, replace(request, servers=servers), now)
        except (NoCapacity, FieldError) as exc:
            scores.append(CandidateScore(index, None, str(exc), 0.0, 0.0))
            continue
        added = jobs_load(fabric, [job])
        peak = max(
            [base_spine_peak, *((base.get(e, 0.0) + bps) / capacity[e] for e, bps in added.items() if e in spine)]
        )
        scores.append(CandidateScore(index, job, "", job.predicted_max_utilization, peak))
    # Equal scores (an empty fabric: one job's flows fill a core link no more
    # than a spine link) go to the candidate crossing the core least: its
    # capacity is the scarce one, and every job's cross-cluster flows share it.
    order = sorted(
        scores, key=lambda s: (s.job is None, -round(s.score, 12), round(s.cross_cluster_share, 12), s.candidate)
    )
    ranks = {s.candidate: rank for rank, s in enumerate(order, start=1)}
    return [replace(s, rank=ranks[s.candidate]) for s in scores]
