"""Placement end to end: a scheduler's gRPC calls against the running daemon
and the emulated fabric; the switches' tables and real traffic are the proof.
Accepted vs enforced: a job's PROGRAMMED event comes only once its entries are
on every switch it uses, and not while one of those switches is away."""

import threading
import time

import grpc
import pytest

from controller.api.gen.railyard.v1 import placement_pb2 as ppb
from controller.fabric import Fabric
from controller.fabric import addressing as ad
from controller.intent.drains import DrainTarget
from controller.southbound.overlay import owner_cookie
from emulation.net import ovs
from emulation.processes.controller_process import total
from emulation.traffic.iperf import FlowSpec, TrafficRun
from tests.integration.helpers import SPINE_OF_UPLINK, railyard_entries, uplink_bytes, window

UPLINK_OF_SPINE = {spine: port for port, spine in SPINE_OF_UPLINK.items()}
LEAVES = ("ryl0r0", "ryl0r1", "ryl1r0", "ryl1r1")


@pytest.fixture
def emu(fabric_and_controller):
    return fabric_and_controller[0]


def placement(job: ppb.Job) -> ppb.Job:
    """The job as placed, without programmed_revision: the fabric's state, which moves on."""
    out = ppb.Job()
    out.CopyFrom(job)
    out.ClearField("programmed_revision")
    return out


def cross_pod(job):
    return [f for f in job.flows if f.spine]


def job_entries():
    return {leaf: railyard_entries(leaf) for leaf in LEAVES}


def collect(stream, events):
    try:
        for event in stream:
            events.append(event)
    except grpc.RpcError:
        pass  # cancelled, or the daemon went away


def test_ring_job_across_pods_is_steered_released_and_survives_restart(emu, ctl):
    fabric = emu.fabric
    events: list[ppb.JobEvent] = []
    with ctl.client() as client:
        watch = client.watch_jobs(timeout_s=120)
        watcher = threading.Thread(target=collect, args=(watch, events), daemon=True)
        watcher.start()
        time.sleep(0.3)
        reply = client.place_job("ring-1", 8, "ring", flow_gbps=100.0, request_id="req-1", view="full")
        job = reply.job
        assert reply.created and list(job.pods) == [0, 1]
        assert [(g.rank, g.rail) for g in job.gpus] == [(r, r % 2) for r in range(8)]  # rank g on rail g
        flows = cross_pod(job)
        assert len(flows) == 4  # the ring crosses the pod boundary twice, on each of 2 rails
        # A retry with the same request_id is answered with the original; without it, refused.
        again = client.place_job("ring-1", 8, "ring", flow_gbps=100.0, request_id="req-1", view="full")
        assert not again.created and placement(again.job) == placement(job)
        with pytest.raises(grpc.RpcError) as err:
            client.place_job("ring-1", 8, "ring", flow_gbps=100.0)
        assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
        with pytest.raises(grpc.RpcError) as err:
            client.place_job("ring-2", 2, "ring")
        # grpc-stubs type RpcError.details() as str | None; the daemon always sets details on these errors.
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "free GPUs: 0" in err.value.details()  # type: ignore[operator]
    ctl.wait_reconciles(1)

    # Every cross-pod flow has its entry on its source leaf, out of the uplink to its spine.
    entries = job_entries()
    for flow in flows:
        leaf = fabric.attachment(ad.parse_nic_address(flow.src_address)).node
        steering = [
            e
            for m, e in entries[leaf].items()
            if f"nw_src={flow.src_address}," in m + "," and f"nw_dst={flow.dst_address}" in m
        ]
        assert [e["actions"] for e in steering] == [f"dec_ttl,output:{UPLINK_OF_SPINE[flow.spine]}"]
    assert sum(len(e) for e in entries.values()) == 4

    # Real traffic follows: three UDP flows per cross-pod pair, source ports that ECMP would spread.
    specs = [
        FlowSpec(
            ad.parse_nic_address(f.src_address),
            ad.parse_nic_address(f.dst_address),
            "udp",
            41000 + 7 * i + k,
            4791 + i * 3 + k,
            rate_bps=12e6,
        )
        for i, f in enumerate(flows)
        for k in range(3)
    ]
    run = TrafficRun(emu.popen, specs, duration_s=5).start()
    try:
        time.sleep(1.5)
        before, after = window(fabric, 2.0)
    finally:
        results = run.wait()
    assert all(not r.error for r in results)
    for flow in flows:
        leaf = fabric.attachment(ad.parse_nic_address(flow.src_address)).node
        sent = uplink_bytes(before, after, leaf)
        chosen = UPLINK_OF_SPINE[flow.spine]
        other = next(p for p in sent if p != chosen)
        assert sent[chosen] > 6e6 and sent[other] < sent[chosen] * 0.05, (leaf, flow.spine, sent)

    # Restart (kill -9): the job is still there and nothing is re-sent.
    ctl.kill()
    ctl.start()
    samples = ctl.wait_ready(len(fabric.switches))
    samples = ctl.wait_reconciles(1)
    assert total(samples, "railyard_flow_mods_total") == 0
    assert total(samples, "railyard_jobs_active") == 1
    with ctl.client() as client:
        after_restart = client.get_job("ring-1", view="full")
        assert placement(after_restart) == placement(job)
        assert after_restart.programmed_revision > 0  # the restarted controller found it on every switch
        released = client.release_job("ring-1")
        assert released.job_id == "ring-1"
        with pytest.raises(grpc.RpcError) as err:
            client.get_job("ring-1", view="full")
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    ctl.wait_reconciles(1)
    assert all(not e for e in job_entries().values())
    samples = ctl.metrics()
    assert total(samples, "railyard_gpus_allocated") == 0 and total(samples, "railyard_jobs_active") == 0

    watch.cancel()
    watcher.join(timeout=5)
    kinds = [e.kind for e in events]
    assert kinds[:1] == [ppb.JobEvent.KIND_PLACED]  # the stream died with the killed daemon
    summary = ppb.Job()
    summary.CopyFrom(job)
    del summary.flows[:]  # watch events carry the summary: all but the flows
    assert placement(events[0].job) == placement(summary) and events[0].job.flow_count == len(job.flows)


def test_drain_moves_job_flows_and_refuses_the_last_path(emu, ctl):
    with ctl.client() as client:
        job = client.place_job("ring-d", 8, "ring", flow_gbps=100.0, view="full").job
        used = sorted({f.spine for f in cross_pod(job)})
        victim = used[0]
        other = next(s for s in ("rys0", "rys1") if s != victim)
        reply = client.drain(DrainTarget.SWITCH, victim)
        assert list(reply.rerouted_job_ids) == ["ring-d"]
        moved = client.get_job("ring-d", view="full")
        assert {f.spine for f in cross_pod(moved)} == {other}
        with pytest.raises(grpc.RpcError) as err:
            client.drain(DrainTarget.SWITCH, other)
        # grpc-stubs type RpcError.details() as str | None; the daemon always sets details on these errors.
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "last path" in err.value.details()  # type: ignore[operator]
        links = {link.name: link for link in client.list_links()}
        assert all(link.drained is False for link in links.values())
        assert {s.name for s in client.get_fabric().switches if s.drained} == {victim}
        ctl.wait_reconciles(1)
        for leaf in LEAVES:
            for entry in railyard_entries(leaf).values():
                assert entry["actions"] == f"dec_ttl,output:{UPLINK_OF_SPINE[other]}"
        client.drain(DrainTarget.SWITCH, victim, drained=False)
        # Drain a link by either end: the leaf's uplink to the other spine.
        link = client.drain(DrainTarget.LINK, f"ryl0r0:{UPLINK_OF_SPINE[other]}")
        assert link.link == f"ryl0r0:{UPLINK_OF_SPINE[other]}"
        client.drain(DrainTarget.LINK, link.link, drained=False)
        client.release_job("ring-d")
        assert client.get_fabric().free_gpu_count == 8


def test_live_link_view_reports_telemetry_and_placement_avoids_hot_pods(emu, ctl):
    from controller.api.gen.railyard.v1 import telemetry_pb2 as tpb

    with ctl.client() as client:
        now = time.time()
        batch = tpb.TelemetryBatch()
        for leaf in ("ryl0r0", "ryl0r1"):  # pod 0's uplinks are busy with someone else's traffic
            for port in (3, 4):
                hop = batch.hops.add(switch=leaf, egress_port=port, tx_bps=300e9, queue_bytes=50_000)
                hop.observe_time.FromNanoseconds(int(now * 1e9))
        batch.hops.add(switch="nope", egress_port=1, tx_bps=1.0)
        summary = client.report_telemetry([batch])
        assert summary.accepted_records == 4 and summary.rejected_records == 1
        time.sleep(0.3)
        (uplink,) = [link for link in client.list_links("ryl0r0") if link.name == "ryl0r0:3"]
        measured = {d.from_node: d for d in uplink.directions}["ryl0r0"]
        assert measured.measured_bps == pytest.approx(300e9) and measured.queue_bytes == 50_000
        # A 2-server job fits in either pod; pod 1 has the headroom.
        job = client.place_job("small", 4, "ring", flow_gbps=10.0, view="full").job
        assert list(job.pods) == [1]
        client.release_job("small")


def test_free_capacity_per_pod_and_server(emu, ctl):
    with ctl.client() as client:
        gpu = client.place_job("free-1", 1, "ring").job.gpus[0]
        free = client.free_capacity()
        assert (free.gpu_count, free.free_gpu_count, free.whole_free_servers, free.partly_free_servers) == (8, 7, 3, 1)
        (server,) = [s for s in free.servers if s.server == gpu.server]
        assert server.free_gpu_count == 1 and list(server.free_rails) == [1 - gpu.rail]
        fabric = client.get_fabric()
        assert fabric.free_gpu_count == 7
        per_pod = [(p.pod, p.free_gpu_count) for p in fabric.pod_capacity]
        assert per_pod == [(p, 3 if p == gpu.pod else 4) for p in (0, 1)]
        other = client.free_capacity([1 - gpu.pod])
        assert [p.pod for p in other.pods] == [1 - gpu.pod] and other.free_gpu_count == 4 and len(other.servers) == 2
        assert len(client.free_capacity(include_full_servers=True).servers) == 4
        with pytest.raises(grpc.RpcError) as err:
            client.free_capacity([9])
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # The next 1-GPU job fills the same server's other GPU: no server is left half used.
        second = client.place_job("free-2", 1, "ring").job.gpus[0]
        assert second.server == gpu.server
        assert client.free_capacity().partly_free_servers == 0


def steering_switches(fabric: Fabric, job: ppb.Job) -> dict[str, int]:
    """Switch -> how many entries the job needs there (where ECMP has a choice)."""
    needed: dict[str, int] = {}
    for flow in job.flows:
        if flow.spine:
            src, dst = ad.parse_nic_address(flow.src_address), ad.parse_nic_address(flow.dst_address)
            for hop in fabric.steering_hops(src, dst, flow.spine):
                needed[hop.node] = needed.get(hop.node, 0) + 1
    return needed


def job_entries_on(switches, job_id: str) -> dict[str, int]:
    cookie = owner_cookie("job", job_id)
    return {s: sum(e["cookie"] == cookie for e in railyard_entries(s).values()) for s in switches}


class ProgrammedWatch:
    """A WatchJobs stream with PROGRAMMED events; on each, a dump of the
    switches the job uses is taken at once, in the reader thread."""

    def __init__(self, client, switches_of) -> None:
        self.dumps: dict[str, dict[str, int]] = {}
        self.arrived: dict[str, threading.Event] = {}
        self._switches_of = switches_of
        self._stream = client.watch_jobs(timeout_s=120, include_programmed=True)
        threading.Thread(target=self._read, daemon=True).start()
        time.sleep(0.3)  # subscribed before anything is placed

    def expect(self, job_id: str) -> threading.Event:
        return self.arrived.setdefault(job_id, threading.Event())

    def _read(self) -> None:
        try:
            for event in self._stream:
                if event.kind == ppb.JobEvent.KIND_PROGRAMMED:
                    job_id = event.job.job_id
                    self.dumps[job_id] = job_entries_on(self._switches_of(job_id), job_id)
                    self.expect(job_id).set()
        except Exception:  # cancelled at the end of the test
            pass

    def cancel(self) -> None:
        self._stream.cancel()


def test_programmed_comes_once_every_switch_holds_the_job_and_not_while_one_is_away(emu, ctl):
    needed: dict[str, dict[str, int]] = {}
    away = ""
    with ctl.client() as client:
        watch = ProgrammedWatch(client, lambda job_id: needed[job_id])
        try:
            placed = client.place_job("ring-p", 8, "ring", flow_gbps=100.0, view="full").job
            needed["ring-p"] = steering_switches(emu.fabric, placed)
            assert len(needed["ring-p"]) >= 2
            assert watch.expect("ring-p").wait(20), "no PROGRAMMED event"
            assert watch.dumps["ring-p"] == needed["ring-p"]  # every entry, on every switch, at that moment
            assert client.get_job("ring-p").programmed_revision > 0
            client.release_job("ring-p")

            # One of the switches the same job will use goes away (pointed at a
            # port nobody listens on: OVS keeps its tables, as a dead controller
            # link would). The job is accepted, and not programmed.
            away = sorted(needed["ring-p"])[0]
            ovs.run(["ovs-vsctl", "set-controller", away, "tcp:127.0.0.1:9"])
            time.sleep(1.5)
            placed = client.place_job("ring-q", 8, "ring", flow_gbps=100.0, view="full").job
            needed["ring-q"] = steering_switches(emu.fabric, placed)
            assert away in needed["ring-q"]
            assert not watch.expect("ring-q").wait(5), "PROGRAMMED while one of its switches was away"
            assert client.get_job("ring-q").programmed_revision == 0
            assert job_entries_on([away], "ring-q") == {away: 0}
            present = job_entries_on(sorted(set(needed["ring-q"]) - {away}), "ring-q")
            assert present == {s: n for s, n in needed["ring-q"].items() if s != away}  # the rest went ahead

            ovs.run(["ovs-vsctl", "set-controller", away, ctl.ports.controller_target])
            assert watch.expect("ring-q").wait(20), "no PROGRAMMED after the switch came back"
            assert watch.dumps["ring-q"] == needed["ring-q"]
        finally:
            watch.cancel()
            if away:
                ovs.run(["ovs-vsctl", "set-controller", away, ctl.ports.controller_target])
