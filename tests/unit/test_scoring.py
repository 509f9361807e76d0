"""ScorePlacements' core: each candidate server set placed as PlaceJob
would place it, nothing kept, ranked by the predicted utilization."""

from controller.fabric import load_fabric
from controller.fabric.spec import SPECS_DIR
from controller.te.jobs import Job, JobRequest, Pattern
from controller.te.placement import FabricState, place
from controller.te.scoring import score_candidates

DEMO = load_fabric()


def test_a_candidate_inside_one_pod_outranks_one_across_pods_and_busy_servers_are_infeasible():
    busy = place(DEMO, FabricState(), JobRequest("busy", 2, Pattern.RING, 0.0, servers=("ryh1s1",)), 0.0)
    state = FabricState({"busy": busy})
    request = JobRequest("next", 4, Pattern.RING, 0.0)
    candidates = [("ryh0s0", "ryh1s0"), ("ryh0s0", "ryh0s1"), ("ryh0s0", "ryh1s1"), ("ryh0s0", "ryh9s9")]
    scores = score_candidates(DEMO, state, request, candidates, 1.0)
    assert [s.candidate for s in scores] == [0, 1, 2, 3]
    across, inside, taken, unknown = scores
    assert inside.rank == 1 and across.rank == 2 and {taken.rank, unknown.rank} == {3, 4}
    assert inside.spine_tier_peak == 0.0 < across.spine_tier_peak  # a pod's ring never leaves its leaves
    assert inside.score > across.score > 0 and taken.score == unknown.score == 0.0
    assert taken.job is None and "ryh1s1" in taken.reason and unknown.job is None and "ryh9s9" in unknown.reason
    assert state.jobs.keys() == {"busy"}  # nothing kept


def test_scores_agree_with_placing_each_candidate_and_reading_the_prediction_back():
    fabric = load_fabric(SPECS_DIR / "rail-2k.yaml")
    servers = sorted(s.name for s in fabric.servers)
    placed: dict[str, Job] = {}
    for i in range(6):  # some load, so candidates differ
        job = place(fabric, FabricState(placed), JobRequest(f"bg{i}", 64, Pattern.ALL_TO_ALL, 100.0), float(i))
        placed[job.job_id] = job
    state = FabricState(placed)
    taken = {f"ryh{g.nic.pod}s{g.nic.server}" for job in placed.values() for g in job.gpus}
    free = [s for s in servers if s not in taken]
    candidates = [tuple(free[i * 7 % len(free) :][:4]) for i in range(8)]
    request = JobRequest("scored", 32, Pattern.ALL_TO_ALL, 100.0)
    scores = score_candidates(fabric, state, request, candidates, 10.0)
    for score, servers_of in zip(scores, candidates):
        alone = place(fabric, state, JobRequest("scored", 32, Pattern.ALL_TO_ALL, 100.0, servers=servers_of), 10.0)
        assert score.job is not None and score.predicted_max_utilization == alone.predicted_max_utilization
    ranked = sorted(scores, key=lambda s: s.rank)
    assert [s.score for s in ranked] == sorted((s.score for s in scores), reverse=True)


def test_on_three_tiers_a_candidate_inside_one_cluster_crosses_no_core_and_outranks_one_across_two():
    fabric = load_fabric(SPECS_DIR / "three-tier.yaml")  # cluster 0: pods 0-1; cluster 1: pods 2-3
    request = JobRequest("next", 4, Pattern.RING, 0.0)
    across, inside = score_candidates(fabric, FabricState(), request, [("ryh0s0", "ryh2s0"), ("ryh0s0", "ryh1s0")], 1.0)
    assert inside.cross_cluster_share == 0.0
    assert across.job is not None and across.cross_cluster_share == across.job.cross_cluster_share > 0.0
    # Alone on the fabric a ring fills a core link no more than a spine link:
    # equal scores, and the core's share decides.
    assert inside.score == across.score and inside.rank == 1 and across.rank == 2
    infeasible = score_candidates(fabric, FabricState(), request, [("ryh0s0", "ryh9s9")], 1.0)[0]
    assert infeasible.job is None and infeasible.cross_cluster_share == 0.0
