"""The GPU ledger, free capacity per server and per pod, the load ledger, and
the fast placement path (ledgers) against the plain one (recomputed)."""

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.api.fabric import free_capacity_to_proto
from controller.cli.commands import _show_free
from controller.fabric import Endpoint, NicId, build_fabric, load_fabric, parse_spec
from controller.intent.service import IntentService
from controller.intent.store import SqliteIntentStore
from controller.metrics import Metrics
from controller.te.capacity import Usage, free_capacity
from controller.te.jobs import Gpu, Job, JobRequest, Pattern
from controller.te.load import LoadLedger, jobs_load, max_utilization
from controller.te.placement import FabricState, NoCapacity, _pod_uplink_load, place

DEMO = load_fabric()  # 2 pods x 2 servers x 2 rails
PER_RAIL = build_fabric(
    parse_spec(
        "pods: 3\nservers_per_pod: 3\nrails: 4\nspines: 2\nplane_mode: per-rail\n"
        "rates: {nic_gbps: 400, emulated_nic_mbps: 30}\n"
    )
)


def job_on(job_id: str, nics: list[NicId], exclusive: bool = False) -> Job:
    request = JobRequest(job_id, len(nics), Pattern.RING, 0.0, exclusive=exclusive)
    return Job(request, tuple(Gpu(i, nic) for i, nic in enumerate(nics)), (), 0.0, 0.0)


def test_free_capacity_per_server_and_per_pod_by_hand():
    usage = Usage.of(
        [
            job_on("one", [NicId(0, 0, 0)]),  # pod 0, server 0: rail 1 left free
            job_on("whole", [NicId(0, 1, 0), NicId(1, 1, 0)]),  # pod 1, server 0: full
            job_on("excl", [NicId(1, 1, 1)], exclusive=True),  # pod 1, server 1: rail 0 free, but held
        ]
    )
    capacity = free_capacity(DEMO, usage)
    assert (capacity.gpus, capacity.free_gpus) == (8, 3)
    assert [(p.pod, p.gpus, p.free_gpus, p.whole_servers_free, p.partly_free_servers) for p in capacity.pods] == [
        (0, 4, 3, 1, 1),
        (1, 4, 0, 0, 0),
    ]
    assert [(s.name, s.free_gpus, s.free_rails, s.exclusive) for s in capacity.servers] == [
        ("ryh0s0", 1, (1,), False),
        ("ryh0s1", 2, (0, 1), False),
    ]
    every = free_capacity(DEMO, usage, all_servers=True).servers
    assert [(s.name, s.free_gpus, s.exclusive) for s in every] == [
        ("ryh0s0", 1, False),
        ("ryh0s1", 2, False),
        ("ryh1s0", 0, False),
        ("ryh1s1", 0, True),
    ]


def test_free_capacity_reply_narrows_to_pods_and_prints():
    usage = Usage.of([job_on("one", [NicId(0, 0, 0)])])
    reply = free_capacity_to_proto(free_capacity(DEMO, usage), 7, pods={1})
    assert (reply.gpu_count, reply.free_gpu_count, reply.whole_free_servers, reply.partly_free_servers) == (4, 4, 2, 0)
    assert [p.pod for p in reply.pods] == [1] and [s.server for s in reply.servers] == ["ryh1s0", "ryh1s1"]
    assert reply.intent_revision == 7 and list(reply.servers[0].free_rails) == [0, 1]
    whole = free_capacity_to_proto(free_capacity(DEMO, usage), 7)
    assert (whole.free_gpu_count, whole.partly_free_servers) == (7, 1)


def test_free_cli_table(capsys):
    usage = Usage.of([job_on("one", [NicId(0, 0, 0)])])
    _show_free(free_capacity_to_proto(free_capacity(DEMO, usage), 1), servers=True)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["POD", "GPUS", "FREE", "WHOLE_FREE_SERVERS", "PARTLY_FREE_SERVERS"]
    assert out[3].split() == ["total", "8", "7", "3", "1"]
    assert out[5].split() == ["NODE", "SERVER", "POD", "GPUS", "FREE", "FREE_RAILS", "EXCLUSIVE"]
    assert out[6].split() == ["ryh0s0", "ryh0s0", "0", "2", "1", "1", "no"]  # no host map: a node is its server


def ledger_fixture(fabric, jobs):
    usage, ledger = Usage(), LoadLedger(fabric)
    for job in jobs:
        usage.add(job)
        ledger.add(job)
    return usage, ledger


def recount(jobs):
    """Independent of the ledger: used rails per server and GPUs per (pod, rail)."""
    masks: dict[tuple[int, int], int] = {}
    held: Counter = Counter()
    for job in jobs:
        for g in job.gpus:
            masks[(g.nic.pod, g.nic.server)] = masks.get((g.nic.pod, g.nic.server), 0) | 1 << g.nic.rail
            held[(g.nic.pod, g.nic.rail)] += 1
    return masks, +held


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_ledgers_match_recomputation_and_the_fast_path_places_alike(data):
    """Placing with the ledgers the service keeps gives the same job as placing
    from the jobs alone, with or without measured traffic; the ledgers stay
    equal to what recomputing from the jobs gives."""
    fabric = data.draw(st.sampled_from([DEMO, PER_RAIL]), label="fabric")
    rails = fabric.rails
    uplinks = [e for ups in fabric.pod_uplinks.values() for e in ups]
    jobs: dict[str, Job] = {}
    usage, ledger = Usage(), LoadLedger(fabric)
    for step in range(data.draw(st.integers(1, 10), label="steps")):
        if jobs and data.draw(st.booleans(), label="release?"):
            victim = jobs.pop(data.draw(st.sampled_from(sorted(jobs)), label="victim"))
            usage.remove(victim)
            ledger.add(victim, sign=-1.0)
        else:
            k = data.draw(st.sampled_from([k for k in range(1, rails + 1) if rails % k == 0]), label="k")
            request = JobRequest(
                f"j{step}",
                k * data.draw(st.integers(1, 4), label="servers"),
                data.draw(st.sampled_from(list(Pattern)), label="pattern"),
                data.draw(st.sampled_from([0.0, 50.0, 200.0]), label="gbps"),
                gpus_per_server=k,
                exclusive=data.draw(st.booleans(), label="exclusive"),
            )
            busy = data.draw(st.lists(st.sampled_from(uplinks), max_size=3, unique=True), label="busy")
            measured = dict.fromkeys(busy, 300e9)
            plain = FabricState(dict(jobs), measured_bps=measured)
            fast = FabricState(jobs, measured_bps=measured, jobs_bps=ledger.bps, usage=usage, ledger=ledger)
            try:
                expected = place(fabric, plain, request, float(step))
            except NoCapacity:
                with pytest.raises(NoCapacity):
                    place(fabric, fast, request, float(step))
                continue
            assert place(fabric, fast, request, float(step)) == expected
            jobs[expected.job_id] = expected
            usage.add(expected)
            ledger.add(expected)
        masks, held = recount(jobs.values())
        assert usage.masks == masks and +usage.held == held
        load = jobs_load(fabric, jobs.values())
        assert ledger.bps == pytest.approx(dict(load))
        assert ledger.peak() == pytest.approx(max_utilization(fabric, load))
        assert ledger.pod_uplink_bps() == pytest.approx(_pod_uplink_load(fabric, load))
        capacity = free_capacity(fabric, usage)
        assert capacity.free_gpus == fabric.gpu_count - sum(held.values()) - sum(
            bin(((1 << rails) - 1) & ~masks.get(key, 0)).count("1") for key in usage.exclusive
        )


def test_small_jobs_take_the_tightest_server_anywhere_in_the_fabric():
    """Eight 1-GPU jobs on 4-rail servers, then one released: the next 1-GPU job
    refills that hole, even in another pod than the one with the most headroom."""
    fabric = PER_RAIL
    jobs: dict[str, Job] = {}
    for n in range(8):
        job = place(fabric, FabricState(dict(jobs)), JobRequest(f"a{n}", 1, Pattern.RING, 0.0), float(n))
        jobs[job.job_id] = job
    servers = Counter((g.nic.pod, g.nic.server) for j in jobs.values() for g in j.gpus)
    assert sorted(servers.values()) == [4, 4]  # two full servers, no half-used ones
    hole = jobs.pop("a5").gpus[0].nic
    # Someone else's traffic on the hole's pod: headroom alone would send the next job elsewhere.
    busy = dict.fromkeys(fabric.pod_uplinks[hole.pod], 390e9)
    refill = place(fabric, FabricState(dict(jobs), measured_bps=busy), JobRequest("b", 1, Pattern.RING, 0.0), 9.0)
    assert refill.gpus[0].nic == hole


def test_service_free_capacity_and_allocation_gauges_follow_place_and_release(tmp_path):
    metrics = Metrics(sorted(DEMO.switches))
    svc = IntentService(DEMO, SqliteIntentStore(tmp_path / "i.db"), metrics)

    def gauge(pod: int, rail: int) -> float | None:
        return metrics.registry.get_sample_value("railyard_gpus_allocated", {"pod": str(pod), "rail": str(rail)})

    assert gauge(1, 1) == 0
    one, _ = svc.place_job(JobRequest("one", 1, Pattern.RING, 0.0))
    ring, _ = svc.place_job(JobRequest("ring", 4, Pattern.RING, 100.0))
    capacity, revision = svc.free_capacity()
    assert revision == 2 and capacity.free_gpus == 3
    held = Counter((g.nic.pod, g.nic.rail) for j in (one, ring) for g in j.gpus)
    assert all(gauge(pod, rail) == held[(pod, rail)] for pod in (0, 1) for rail in (0, 1))
    peak = metrics.registry.get_sample_value("railyard_predicted_max_link_utilization_ratio")
    assert peak == pytest.approx(max_utilization(DEMO, jobs_load(DEMO, [one, ring])))
    svc.release_job("ring")
    assert svc.free_capacity()[0].free_gpus == 7
    held = Counter((g.nic.pod, g.nic.rail) for g in one.gpus)
    assert all(gauge(pod, rail) == held[(pod, rail)] for pod in (0, 1) for rail in (0, 1))
    # A restart rebuilds the same ledgers from the store.
    free = svc.free_capacity()[0]
    svc.close()
    again = IntentService(DEMO, SqliteIntentStore(tmp_path / "i.db"), Metrics(sorted(DEMO.switches)))
    assert again.free_capacity()[0] == free


def test_ledger_reset_after_a_reroute():
    jobs = [place(DEMO, FabricState(), JobRequest("r", 8, Pattern.RING, 100.0), 0.0)]
    ledger = LoadLedger(DEMO, jobs)
    ledger.reset([])
    assert ledger.bps == {} and ledger.peak() == 0.0 and set(ledger.pod_uplink_bps().values()) == {0.0}
    ledger.reset(jobs)
    assert ledger.bps == pytest.approx(dict(jobs_load(DEMO, jobs)))
    assert Endpoint("ryh0s0-r0", 0) in ledger.bps


def test_a_job_that_does_not_fit_is_told_the_real_free_servers():
    """Two whole servers free, a job of three servers: the message counts the
    two, not the servers of the rail set a failed search last tried (none)."""
    jobs = {"half": job_on("half", [NicId(0, 0, 0), NicId(1, 0, 0), NicId(0, 0, 1), NicId(1, 0, 1)])}
    with pytest.raises(NoCapacity) as err:
        place(DEMO, FabricState(jobs), JobRequest("x", 6, Pattern.RING, 0.0), 0.0)
    assert "free GPUs: 4 (pod 1: 4)" in str(err.value)
    assert "servers with 2 or more GPUs free: pod 1: 2 (3 needed on the same rails)" in str(err.value)
