"""Placement on three-tier fabrics: a job one cluster has room for stays in
it; a larger one spans as few clusters as can hold it; the share of its
demand that crosses clusters is on the job, and in the API."""

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.api.placement import job_to_proto
from controller.fabric import NicId, build_fabric, load_fabric, load_spec, parse_spec
from controller.fabric.spec import SPECS_DIR
from controller.te.capacity import Usage, free_capacity
from controller.te.jobs import Gpu, Job, JobRequest, Pattern, job_from_doc, job_to_doc
from controller.te.load import jobs_load, max_utilization
from controller.te.placement import FabricState, NoCapacity, place

THREE_TIER = build_fabric(load_spec(SPECS_DIR / "three-tier.yaml"))  # 2 clusters x 2 pods x 2 servers x 2 rails
MID = build_fabric(  # 4 clusters of 8 pods x 4 servers x 8 rails: 256 GPUs a cluster
    parse_spec(
        "name: mid\nclusters: 4\npods: 8\nservers_per_pod: 4\nrails: 8\nspines: 4\n"
        "core: {switches: 4, oversubscription: 4}\nrates: {nic_gbps: 400, emulated_nic_mbps: 10}\n"
    )
)


def clusters_of(fabric, job):
    return {fabric.spec.cluster_of(pod) for pod in job.pods}


def occupied(job_id, nics):
    """A job holding exactly these GPUs (no flows): to fill a fabric by hand."""
    request = JobRequest(job_id, len(nics), Pattern.RING, 0.0)
    return Job(request, tuple(Gpu(i, nic) for i, nic in enumerate(nics)), (), 0.0, 0.0)


def placed(fabric, jobs, request):
    job = place(fabric, FabricState(dict(jobs)), request, now=0.0)
    jobs[job.job_id] = job
    return job


def test_a_job_one_cluster_holds_is_not_split_over_the_emptiest_pods():
    jobs: dict[str, Job] = {}
    placed(THREE_TIER, jobs, JobRequest("a", 2, Pattern.RING, 100.0, servers=("ryh0s0",)))  # cluster 0
    placed(THREE_TIER, jobs, JobRequest("b", 2, Pattern.RING, 100.0, servers=("ryh2s0",)))  # cluster 1
    # 3 servers free in each cluster: packing the emptiest pods first (pods 1
    # and 3) would cross the core, and the idle core predicts no worse.
    job = placed(THREE_TIER, jobs, JobRequest("c", 6, Pattern.RING, 100.0))
    assert len(clusters_of(THREE_TIER, job)) == 1 and job.cross_cluster_share == 0.0
    assert not any(flow.via.startswith("ryk") for flow in job.flows)  # no core
    assert job.predicted_max_utilization == pytest.approx(
        max_utilization(THREE_TIER, jobs_load(THREE_TIER, jobs.values()))
    )


def test_rails_are_chosen_to_keep_a_job_in_one_cluster_over_a_tighter_split():
    servers = [(s.pod, s.index) for s in MID.servers]
    by_cluster = {c: [key for key in servers if MID.spec.cluster_of(key[0]) == c] for c in range(4)}
    nics = []
    for cluster, keys in by_cluster.items():
        nics += [NicId(rail, *keys[0]) for rail in range(4)]  # rails 0-3 of one server in every cluster
        if cluster < 3:
            nics += [NicId(rail, *key) for key in keys[1:] for rail in range(4, 8)]  # rails 4-7 of the rest
    jobs = {"fill": occupied("fill", nics)}
    # Rails 0-3: 31 servers a cluster, tightly (4 GPUs left on each), so only
    # across two; rails 4-7: all 32 servers of cluster 3, loosely.
    job = placed(MID, jobs, JobRequest("j", 128, Pattern.RING, 100.0, gpus_per_server=4))
    assert clusters_of(MID, job) == {3} and {g.nic.rail for g in job.gpus} == {4, 5, 6, 7}


def test_jobs_stay_in_one_cluster_on_a_partly_filled_fabric_and_the_emptiest_is_kept_for_the_largest():
    jobs: dict[str, Job] = {}
    for i, gpus in enumerate([96, 200, 64, 40, 24, 8, 8, 16]):
        job = placed(MID, jobs, JobRequest(f"j{i}", gpus, Pattern.ALL_TO_ALL, 100.0))
        assert len(clusters_of(MID, job)) == 1 and job.cross_cluster_share == 0.0
    free = [0] * 4
    for pod in free_capacity(MID, Usage.of(jobs.values())).pods:
        free[MID.spec.cluster_of(pod.pod)] += pod.free_gpus
    assert 256 in free  # best fit: the small jobs filled in around the large ones
    job = placed(MID, jobs, JobRequest("whole", 256, Pattern.RING, 100.0))
    assert len(clusters_of(MID, job)) == 1


@pytest.mark.parametrize(
    "pattern, share",
    [
        (Pattern.RING, 2 / 6),  # 6 servers, 4 + 2: a ring crosses twice, 2 of each rail's 6 flows
        (Pattern.ALL_TO_ALL, 2 * 4 * 2 / (6 * 5)),  # 16 of 30 pairs (3 + 3 would be 18)
        (Pattern.TREE, 2 / 10),  # pod trees, then one over pods 0, 1, 2: pod 2 joins pod 0
    ],
)
def test_a_job_bigger_than_a_cluster_spans_two_and_reports_the_share_that_crosses(pattern, share):
    job = place(THREE_TIER, FabricState(), JobRequest("big", 12, pattern, 100.0), now=0.0)
    assert clusters_of(THREE_TIER, job) == {0, 1}
    assert sum(1 for g in job.gpus if THREE_TIER.spec.cluster_of(g.nic.pod) == 0) == 8  # cluster 0 whole
    assert job.cross_cluster_share == pytest.approx(share)
    across = {
        f.via for f in job.flows if THREE_TIER.spec.cluster_of(f.src.pod) != THREE_TIER.spec.cluster_of(f.dst.pod)
    }
    assert across and all(via.startswith("ryk") for via in across)  # a core names each crossing path
    assert job_to_proto(THREE_TIER, job).cross_cluster_share == pytest.approx(share)
    assert job_from_doc(job.job_id, job_to_doc(job)) == job


def test_a_ring_crosses_each_cluster_boundary_once_in_rank_order():
    jobs: dict[str, Job] = {}
    for c in (0, 1):  # 16 servers left free in clusters 0 and 1
        placed(MID, jobs, JobRequest(f"half{c}", 128, Pattern.RING, 100.0, servers=_names(MID, c, 16)))
    placed(MID, jobs, JobRequest("c2", 256, Pattern.RING, 100.0))
    placed(MID, jobs, JobRequest("c3", 256, Pattern.RING, 100.0))
    job = placed(MID, jobs, JobRequest("ring", 256, Pattern.RING, 100.0))
    assert clusters_of(MID, job) == {0, 1}
    ranks = sorted(job.gpus)
    changes = sum(
        MID.spec.cluster_of(a.nic.pod) != MID.spec.cluster_of(b.nic.pod)
        for a, b in zip(ranks[:: MID.rails], ranks[MID.rails :: MID.rails])
    )
    assert changes == 1  # cluster 0's ranks, then cluster 1's
    assert job.cross_cluster_share == pytest.approx(2 / 32)


def _names(fabric, cluster, count):
    return tuple(s.name for s in fabric.servers if fabric.spec.cluster_of(s.pod) == cluster)[:count]


def test_a_job_bigger_than_a_cluster_spans_the_fewest_clusters_on_a_partly_filled_fabric():
    jobs: dict[str, Job] = {}
    for c, servers in enumerate([16, 16, 4, 4]):
        placed(MID, jobs, JobRequest(f"fill{c}", servers * 8, Pattern.RING, 100.0, servers=_names(MID, c, servers)))
    # Free: 16, 16, 28, 28 servers. 40 take two clusters; the tightest two
    # that hold them are one of the first two and one of the last two.
    job = placed(MID, jobs, JobRequest("big", 320, Pattern.RING, 100.0))
    clusters = clusters_of(MID, job)
    assert len(clusters) == 2 and len(clusters & {0, 1}) == 1
    assert job.cross_cluster_share == pytest.approx(2 / 40)


def test_the_share_is_zero_on_a_two_tier_fabric():
    demo = load_fabric()
    job = place(demo, FabricState(), JobRequest("j", 8, Pattern.ALL_TO_ALL, 100.0), now=0.0)
    assert len(job.pods) == 2 and job.cross_cluster_share == 0.0
    assert job_to_proto(demo, job).cross_cluster_share == 0.0


# --- a job mix up to 90% full ---------------------------------------------------

CLUSTER_GPUS = MID.gpu_count // MID.spec.clusters
MIXES = {
    # Training jobs' sizes: powers of two, 8 to a cluster's.
    "powers of two": lambda rng: 8 * 2 ** rng.randint(0, (CLUSTER_GPUS // 8).bit_length() - 1),
    "multiples of 8": lambda rng: 8 * rng.randint(1, CLUSTER_GPUS // 8),
}


def _fill(seed, size_of):
    """Jobs of random size placed until 90% of the GPUs are held (one that
    fits nowhere is refused, and the next drawn): (jobs placed, those in one
    cluster, those split while a cluster had room, the share held)."""
    rng = random.Random(seed)
    jobs: dict[str, Job] = {}
    held = refused = inside = avoidable = 0
    while held < 0.9 * MID.gpu_count and refused < 100:
        gpus = size_of(rng)
        room = max(_free_per_cluster(jobs))
        try:
            job = placed(MID, jobs, JobRequest(f"j{len(jobs)}", gpus, rng.choice(list(Pattern)), 100.0))
        except NoCapacity:
            refused += 1
            continue
        held += gpus
        one = len(clusters_of(MID, job)) == 1
        inside += one
        avoidable += not one and room >= gpus
        assert (job.cross_cluster_share > 0.0) == (not one)
    return len(jobs), inside, avoidable, held / MID.gpu_count


def _free_per_cluster(jobs):
    free = [0] * MID.spec.clusters
    for pod in free_capacity(MID, Usage.of(jobs.values())).pods:
        free[MID.spec.cluster_of(pod.pod)] += pod.free_gpus
    return free


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_a_mix_filling_90_percent_keeps_jobs_in_one_cluster(mix):
    runs = [_fill(seed, MIXES[mix]) for seed in range(12)]
    total, inside = sum(r[0] for r in runs), sum(r[1] for r in runs)
    assert all(r[3] >= 0.9 for r in runs)
    assert sum(r[2] for r in runs) == 0  # never split while one cluster had room
    print(f"{mix}: {inside} of {total} jobs in one cluster ({inside / total:.1%})")
    if mix == "powers of two":
        assert inside >= 0.95 * total
    else:
        # Uniform sizes into four clusters: the job that takes the fabric past
        # 80-90% often fits no cluster's rest, and splitting it is the only way
        # to place it (asserted above). Best fit is about what any placer gets
        # here: modelled as four bins of 32 servers over 2,000 seeds, best fit
        # keeps 90.6% of the jobs whole, first fit 90.0%, worst fit 82%.
        assert inside >= 0.85 * total


# --- invariants over request sequences --------------------------------------------


def _fewest_clusters(fabric, jobs, req):
    """Independent of the placer: the fewest clusters any rail set's free
    servers can hold the job in (within max_pods pods); None if none can."""
    rails, spec = fabric.rails, fabric.spec
    k = req.per_server(rails)
    m = req.gpu_count // k
    usage = Usage.of(jobs.values())
    best = None
    for chosen in itertools.combinations(range(rails), k):
        per_pod: dict[int, int] = {}
        for s in fabric.servers:
            key = (s.pod, s.index)
            taken = usage.used.get(key, {})
            if key in usage.exclusive or (req.exclusive and taken) or set(chosen) & taken.keys():
                continue
            per_pod[s.pod] = per_pod.get(s.pod, 0) + 1
        for n in range(1, spec.clusters + 1):
            subsets = itertools.combinations(range(spec.clusters), n)
            if any(_room(spec, per_pod, subset, req.max_pods) >= m for subset in subsets):
                best = n if best is None else min(best, n)
                break
    return best


def _room(spec, per_pod, clusters, max_pods):
    """Servers these clusters offer, within max_pods pods (0: any)."""
    sizes = sorted((n for pod, n in per_pod.items() if spec.cluster_of(pod) in clusters), reverse=True)
    return sum(sizes[: max_pods or None])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_placement_invariants_on_three_tiers(data):
    fabric = THREE_TIER
    jobs: dict[str, Job] = {}
    for step in range(data.draw(st.integers(1, 8), label="steps")):
        if jobs and data.draw(st.booleans(), label="release?"):
            jobs.pop(data.draw(st.sampled_from(sorted(jobs)), label="release"))
            continue
        k = data.draw(st.sampled_from([0, 1, 2]), label="gpus_per_server")
        req = JobRequest(
            f"j{step}",
            (k or 2) * data.draw(st.integers(1, 7), label="servers"),
            data.draw(st.sampled_from(list(Pattern)), label="pattern"),
            data.draw(st.sampled_from([0.0, 100.0, 400.0]), label="gbps"),
            k,
            max_pods=data.draw(st.sampled_from([0, 0, 1, 2, 3]), label="max_pods"),
            exclusive=data.draw(st.booleans(), label="exclusive"),
        )
        fewest = _fewest_clusters(fabric, jobs, req)
        try:
            job = placed(fabric, jobs, req)
        except NoCapacity:
            assert fewest is None
            continue
        assert len(clusters_of(fabric, job)) == fewest
        nics = [g.nic for j in jobs.values() for g in j.gpus]
        assert len(nics) == len(set(nics)), "a GPU is in two jobs"
        assert len({g.nic.rail for g in job.gpus}) == req.per_server(fabric.rails)
        if req.max_pods:
            assert len(job.pods) <= req.max_pods
        assert job.predicted_max_utilization == pytest.approx(max_utilization(fabric, jobs_load(fabric, jobs.values())))
        across = sum(
            f.demand_bps for f in job.flows if fabric.spec.cluster_of(f.src.pod) != fabric.spec.cluster_of(f.dst.pod)
        )
        total = sum(f.demand_bps for f in job.flows)
        assert job.cross_cluster_share == pytest.approx(across / total if total else 0.0)
