"""Job placement invariants, property-based over random request sequences."""

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.errors import Conflict
from controller.fabric import Endpoint, NicId, build_fabric, load_fabric, parse_spec
from controller.intent.drains import rerouted_jobs
from controller.intent.model import Intent
from controller.southbound.overlay import (
    PRIORITY_JOB_QP,
    PRIORITY_PIN_PAIR,
    PRIORITY_TE_MOVE,
    desired_overlay,
    job_entries,
)
from controller.te.demand import planned_flows
from controller.te.jobs import (
    QP_PORTS,
    Drains,
    Job,
    JobError,
    JobFlow,
    JobRequest,
    Pattern,
    job_from_doc,
    job_to_doc,
    with_qp_ports,
)
from controller.te.load import LoadLedger, jobs_load, max_utilization, merged
from controller.te.paths import assign_hashed
from controller.te.patterns import pattern_flows
from controller.te.placement import FabricState, NoCapacity, place

RATES = "rates: {nic_gbps: 400, emulated_nic_mbps: 30}\n"
FABRICS = {
    "shared": build_fabric(
        parse_spec("pods: 3\nservers_per_pod: 4\nrails: 2\nspines: 2\noversubscription: 2\n" + RATES)
    ),
    "per-rail": build_fabric(
        parse_spec("pods: 3\nservers_per_pod: 3\nrails: 4\nspines: 2\nplane_mode: per-rail\n" + RATES)
    ),
}


def rails_of(fabric):
    return max(n.rail for n in fabric.nics) + 1  # independent of Fabric.rails


def used_nics(jobs):
    return [g.nic for job in jobs.values() for g in job.gpus]


def free_servers(fabric, jobs, req, rails=None):
    """Independent of the placer: servers (in fabric order) where `rails` (by
    default 0..k-1) are free and exclusivity allows it."""
    k = req.per_server(rails_of(fabric))
    rails = range(k) if rails is None else rails
    used = set(used_nics(jobs))
    exclusive = {(g.nic.pod, g.nic.server) for j in jobs.values() if j.request.exclusive for g in j.gpus}
    busy = {(n.pod, n.server) for n in used}
    return [
        (s.pod, s.index)
        for s in fabric.servers
        if (s.pod, s.index) not in exclusive
        and not (req.exclusive and (s.pod, s.index) in busy)
        and all(NicId(r, s.pod, s.index) not in used for r in rails)
    ]


def fits(fabric, jobs, req):
    """Is there a set of k rails free on enough servers within max_pods pods?"""
    k = req.per_server(rails_of(fabric))
    m = req.gpu_count // k
    for rails in itertools.combinations(range(rails_of(fabric)), k):
        per_pod: dict[int, int] = {}
        for pod, _ in free_servers(fabric, jobs, req, rails):
            per_pod[pod] = per_pod.get(pod, 0) + 1
        if sum(sorted(per_pod.values(), reverse=True)[: req.max_pods or None]) >= m:
            return True
    return False


def first_fit_peak(fabric, jobs, req, rails=None):
    """The naive placement on `rails`: first free servers in fabric order, paths by ECMP hash."""
    k = req.per_server(rails_of(fabric))
    m = req.gpu_count // k
    rails = range(k) if rails is None else rails
    servers = free_servers(fabric, jobs, req, rails)[:m]
    if len(servers) < m or (req.max_pods and len({p for p, _ in servers}) > req.max_pods):
        return None
    flows = planned_flows(req, servers, rails, fabric.spec.rates.nic_gbps * 1e9)
    base = jobs_load(fabric, jobs.values())
    _, layer = assign_hashed(fabric, Drains(), base, flows)
    return max(max_utilization(fabric, base), layer.touched_peak())


def request_strategy(fabric):
    rails = rails_of(fabric)
    per_server = st.sampled_from([0] + [k for k in range(1, rails + 1) if rails % k == 0])
    return st.builds(
        lambda k, servers, pattern, gbps, exclusive, max_pods: JobRequest(
            "job", (k or rails) * servers, pattern, gbps, k, (), max_pods, exclusive
        ),
        per_server,
        st.integers(1, 5),
        st.sampled_from(list(Pattern)),
        st.sampled_from([0.0, 25.0, 100.0, 200.0]),
        st.booleans(),
        st.sampled_from([0, 0, 1, 2]),
    )


@pytest.mark.parametrize("name", sorted(FABRICS))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_placement_invariants_over_request_sequences(name, data):
    fabric = FABRICS[name]
    jobs: dict[str, Job] = {}
    for step in range(data.draw(st.integers(1, 8), label="steps")):
        if jobs and data.draw(st.booleans(), label="release?"):
            victim = data.draw(st.sampled_from(sorted(jobs)), label="release")
            before = set(used_nics(jobs))
            freed = {g.nic for g in jobs.pop(victim).gpus}
            assert set(used_nics(jobs)) == before - freed  # release frees exactly what was taken
            continue
        req = data.draw(request_strategy(fabric), label="request")
        req = JobRequest(
            f"j{step}", req.gpu_count, req.pattern, req.flow_gbps, req.gpus_per_server, (), req.max_pods, req.exclusive
        )
        jobs_before = dict(jobs)
        try:
            job = place(fabric, FabricState(dict(jobs)), req, now=float(step))
        except NoCapacity as exc:
            assert not fits(fabric, jobs, req), f"refused a job that fits: {exc}"
            continue
        assert fits(fabric, jobs, req)
        jobs[job.job_id] = job

        nics = used_nics(jobs)
        assert len(nics) == len(set(nics)), "a GPU is in two jobs"
        k = req.per_server(rails_of(fabric))
        assert len(job.gpus) == req.gpu_count
        rails = sorted({gpu.nic.rail for gpu in job.gpus})
        assert len(rails) == k, "not the same rails on every server"
        for gpu in job.gpus:
            assert gpu.nic.rail == rails[gpu.rank % k], "rank not on its rail"
        if req.max_pods:
            assert len(job.pods) <= req.max_pods
        assert job.predicted_max_utilization == pytest.approx(max_utilization(fabric, jobs_load(fabric, jobs.values())))
        naive = first_fit_peak(fabric, jobs_before, req, rails)
        if naive is not None:
            assert job.predicted_max_utilization <= naive + 1e-9, "worse than naive first-fit"
        desired_overlay(fabric, Intent(jobs=jobs))  # every placed flow renders to entries


def test_cross_pod_flows_are_spread_evenly_over_spines():
    fabric = FABRICS["shared"]
    job = place(fabric, FabricState(), JobRequest("a2a", 16, Pattern.ALL_TO_ALL, 20.0, max_pods=2), now=0)
    assert len(job.pods) == 2
    per_uplink: dict[tuple[str, str], int] = {}
    for flow in job.flows:
        if flow.via:
            leaf = fabric.attachment(flow.src).node
            per_uplink[(leaf, flow.via)] = per_uplink.get((leaf, flow.via), 0) + 1
    for leaf in {leaf for leaf, _ in per_uplink}:
        counts = [per_uplink.get((leaf, spine), 0) for spine in ("rys0", "rys1")]
        assert max(counts) - min(counts) <= 1, counts  # 16 flows per leaf: 8 and 8, not what a hash gives
    hashed_peak = first_fit_peak(fabric, {}, JobRequest("a2a", 16, Pattern.ALL_TO_ALL, 20.0, max_pods=2))
    assert job.predicted_max_utilization <= hashed_peak


NARROW = load_fabric("narrow-uplinks")  # 3 pods x 2 servers x 2 rails, 3 spines: uplinks 2/3 of a NIC


def test_queue_pairs_are_placed_apart_only_where_a_connection_fits_no_spine_and_pinned_on_ports_it_names():
    servers = ("ryh0s0", "ryh1s0", "ryh2s0")
    one = place(NARROW, FabricState(), JobRequest("one", 3, Pattern.RING, 0.0, 1, servers), now=0)
    two = place(NARROW, FabricState(), JobRequest("two", 3, Pattern.RING, 0.0, 1, servers, qps_per_connection=2), 0)
    assert len(two.flows) == 2 * len(one.flows) == 6
    # A connection at line rate fits no 2/3-NIC uplink; its two QPs at half each do, on two
    # spines, and then only the NICs themselves are full.
    assert one.predicted_max_utilization == pytest.approx(1.5) and two.predicted_max_utilization == pytest.approx(1.0)
    for pair in {(f.src, f.dst) for f in two.flows}:
        assert len({f.via for f in two.flows if (f.src, f.dst) == pair}) == 2
    assert len(one.pinned) == 3 and all(f.src_port == 0 for f in one.flows) and one.pinned_qps == {}
    # No NIC-pair entry can steer QPs apart: each QP gets a UDP source port of
    # RoCEv2's range, distinct at its NIC, and an entry on it at its source leaf.
    assert two.pinned == {}
    assert two.pinned_qps == {(f.src, f.dst, f.src_port): f.via for f in two.flows}
    assert sorted(f.src_port for f in two.flows) == [0xC000, 0xC000, 0xC000, 0xC001, 0xC001, 0xC001]
    assert len(job_entries(NARROW, one)) == 3
    qp_entries = job_entries(NARROW, two)
    assert {e.priority for e in qp_entries} == {PRIORITY_JOB_QP}
    assert PRIORITY_PIN_PAIR < PRIORITY_JOB_QP < PRIORITY_TE_MOVE  # above its pair's hash, below a TE move
    matches = [dict(e.match) for e in qp_entries]
    steered = {(m["ipv4_src"], m.get("udp_src") or m["tcp_src"]) for m in matches}
    assert len(qp_entries) == 12 and len(steered) == 6  # each QP over UDP (RoCEv2) and TCP
    assert job_from_doc("two", job_to_doc(two)) == two
    stored_before_ports = {**job_to_doc(one), "flows": [f[:4] for f in job_to_doc(one)["flows"]]}
    assert job_from_doc("one", stored_before_ports) == one
    # Where whole connections fit as well, they are placed whole, and pinned: QPs together.
    three_pod = load_fabric("three-pod")
    whole = place(three_pod, FabricState(), JobRequest("w", 3, Pattern.RING, 0.0, 1, servers, qps_per_connection=2), 0)
    assert len(whole.flows) == 3 and len(whole.pinned) == 3 and whole.request.qps_per_connection == 2
    assert whole.pinned_qps == {} and all(f.src_port == 0 for f in whole.flows)


def test_a_nic_out_of_queue_pair_ports_leaves_the_rest_to_the_hash():
    a, b, c = NicId(0, 0, 0), NicId(0, 1, 0), NicId(0, 2, 0)
    split = [JobFlow(a, b, 1.0, via) for via in ("rys0", "rys1")] * (len(QP_PORTS) // 2 + 1)
    whole = [JobFlow(a, c, 1.0, "rys2"), JobFlow(b, c, 1.0, "rys0"), JobFlow(b, c, 1.0, "rys0")]
    named = with_qp_ports(whole + split)
    assert [f.src_port for f in named[:3]] == [0, 0, 0]  # a connection on one spine: its pair's entry steers it
    ports = [f.src_port for f in named[3:]]
    assert ports[: len(QP_PORTS)] == list(QP_PORTS) and ports[len(QP_PORTS) :] == [0, 0]


def test_packing_prefers_one_pod_and_explains_exhaustion():
    fabric = FABRICS["shared"]
    one = place(fabric, FabricState(), JobRequest("a", 8, Pattern.ALL_TO_ALL, 50.0), now=0)
    assert len(one.pods) == 1 and not any(f.via for f in one.flows)
    jobs = {"a": one}
    with pytest.raises(NoCapacity) as err:
        place(fabric, FabricState(jobs), JobRequest("b", 24, Pattern.RING, 1.0, max_pods=2), now=0)
    assert "free GPUs: 16" in str(err.value) and "pod 0: 0" not in str(err.value)


def test_bad_requests_name_the_field():
    fabric = FABRICS["shared"]
    cases = {
        "gpu_count": JobRequest("x", 0, Pattern.RING, 1.0),
        "gpus_per_server": JobRequest("x", 4, Pattern.RING, 1.0, gpus_per_server=3),
        "flow_gbps": JobRequest("x", 2, Pattern.RING, -1.0),
        "max_pods": JobRequest("x", 2, Pattern.RING, 1.0, max_pods=9),
        "servers[1]": JobRequest("x", 4, Pattern.RING, 1.0, servers=("ryh0s0", "nope")),
        "job_id": JobRequest("X Y", 2, Pattern.RING, 1.0),
        "qps_per_connection": JobRequest("x", 2, Pattern.RING, 1.0, qps_per_connection=17),
    }
    for bad_id in ("ok\n", "x" * 1_000_000):  # a trailing newline passed `match` with `$`
        with pytest.raises(JobError) as err:
            place(fabric, FabricState(), JobRequest(bad_id, 2, Pattern.RING, 1.0), now=0)
        assert err.value.field == "job_id" and len(str(err.value)) < 400  # a 1 MB id is not echoed back
    for field, req in cases.items():
        with pytest.raises(JobError) as err:
            place(fabric, FabricState(), req, now=0)
        assert err.value.field == field and err.value.allowed
    with pytest.raises(JobError) as err:
        place(fabric, FabricState(), JobRequest("x", 3, Pattern.RING, 1.0), now=0)
    assert err.value.field == "gpu_count"  # 3 GPUs on 2-rail servers: not whole servers


def test_draining_a_spine_moves_flows_and_the_last_spine_is_refused():
    fabric = FABRICS["shared"]
    job = place(fabric, FabricState(), JobRequest("r", 16, Pattern.RING, 100.0), now=0)
    intent = Intent(jobs={"r": job})
    moved = rerouted_jobs(fabric, intent, Drains(switches=frozenset({"rys0"})))
    assert {f.via for f in moved["r"].flows if f.via} == {"rys1"}
    intent = Intent(jobs=moved, drains=Drains(switches=frozenset({"rys0"})))
    with pytest.raises(Conflict, match="last path"):
        rerouted_jobs(fabric, intent, Drains(switches=frozenset({"rys0", "rys1"})))


def test_ring_flows_follow_server_order():
    flows = pattern_flows(Pattern.RING, [(1, 0), (0, 1), (0, 0)], 1, 5.0)
    assert [(f.src.pod, f.src.server, f.dst.pod, f.dst.server) for f in flows] == [
        (0, 0, 0, 1),
        (0, 1, 1, 0),
        (1, 0, 0, 0),
    ]
    assert all(isinstance(f, JobFlow) and f.demand_bps == 5.0 for f in flows)


def test_small_jobs_pack_partly_used_servers_and_strand_nothing():
    fabric = load_fabric()  # 2 pods x 2 servers x 2 rails: 8 GPUs
    jobs: dict[str, Job] = {}
    for n in range(8):
        job = place(fabric, FabricState(dict(jobs)), JobRequest(f"one-{n}", 1, Pattern.RING, 10.0), now=float(n))
        jobs[job.job_id] = job
    assert sorted(g.nic for j in jobs.values() for g in j.gpus) == sorted(fabric.nics)  # every GPU, none refused
    # The first two share a server: a 1-GPU job goes where it leaves the fewest free GPUs.
    first, second = (jobs[f"one-{n}"].gpus[0].nic for n in range(2))
    assert (first.pod, first.server) == (second.pod, second.server) and first.rail != second.rail


def test_a_multi_server_job_smaller_than_its_servers_keeps_one_rail_set():
    fabric = FABRICS["per-rail"]  # 4 rails per server
    taken = place(fabric, FabricState(), JobRequest("a", 2, Pattern.RING, 10.0, gpus_per_server=2), now=0.0)
    job = place(fabric, FabricState({"a": taken}), JobRequest("b", 4, Pattern.RING, 10.0, 2), now=1.0)
    by_server: dict[tuple[int, int], set[int]] = {}
    for gpu in job.gpus:
        by_server.setdefault((gpu.nic.pod, gpu.nic.server), set()).add(gpu.nic.rail)
    assert len(by_server) == 2 and len({frozenset(r) for r in by_server.values()}) == 1
    # It fills the server "a" left half free before breaking into a whole one.
    a_server = (taken.gpus[0].nic.pod, taken.gpus[0].nic.server)
    assert a_server in by_server


@pytest.mark.parametrize(
    "pattern, ceiling, expected_gbps",
    [
        (Pattern.RING, 0.0, {400.0}),  # one peer each way: the whole NIC
        (Pattern.ALL_TO_ALL, 0.0, {133.333333333}),  # three peers share each NIC, both ways (whole b/s)
        (Pattern.ALL_TO_ALL, 100.0, {100.0}),  # the scheduler's stated rate caps it
        (Pattern.ALL_TO_ALL, 200.0, {133.333333333}),  # ... but no flow gets more than its NIC's share
    ],
)
def test_placement_predicts_each_flow_at_what_its_nics_give_it(pattern, ceiling, expected_gbps):
    fabric = FABRICS["shared"]
    job = place(fabric, FabricState(), JobRequest("j", 8, pattern, ceiling, gpus_per_server=2), now=0)
    assert len({(g.nic.pod, g.nic.server) for g in job.gpus}) == 4 and job.flows
    assert {round(f.demand_bps / 1e9, 6) for f in job.flows} == {round(g, 6) for g in expected_gbps}
    assert job.predicted_max_utilization == pytest.approx(max_utilization(fabric, jobs_load(fabric, [job])))


def test_the_ledgers_view_of_measured_load_is_the_larger_of_the_two_per_egress():
    fabric = load_fabric()
    job = place(fabric, FabricState({}, Drains()), JobRequest("j", 4, Pattern.RING, 100.0), 0.0)
    ledger = LoadLedger(fabric, [job])
    uplinks = [e for pod in sorted(fabric.pod_uplinks) for e in fabric.pod_uplinks[pod]]
    measured = {uplinks[0]: 3e11, uplinks[-1]: 1.0, Endpoint("not-a-switch", 9): 5e11}
    larger = merged(ledger.bps, {e: v for e, v in measured.items() if e.node in fabric.switches})
    peak, pods = ledger.with_measured(measured)
    assert peak == pytest.approx(max_utilization(fabric, larger))
    assert pods == pytest.approx({p: sum(larger.get(e, 0.0) for e in es) for p, es in fabric.pod_uplinks.items()})
    assert ledger.with_measured(measured) == (peak, pods)  # the same snapshot again: from what was kept
