"""The scenario format (v2): every shipped file loads; every field's bad
values are refused with that field named; expansion on a fabric gives the
flows, ports and iteration plans both engines run."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.cli.main import main
from controller.fabric import NicId, load_fabric
from controller.fabric.spec import SPECS_DIR
from controller.te.jobs import Pattern
from emulation.workload import WorkloadError, available, load_workload, workload_from_dict
from emulation.workload.events import check_events
from emulation.workload.expand import Placed, expand, flow_bytes
from emulation.workload.model import JobItem, JobMixItem, PatternItem
from emulation.workload.placers import railyard_placer

DEMO = load_fabric()  # 2 pods x 2 servers x 2 rails
THREE_POD = load_fabric(SPECS_DIR / "three-pod.yaml")

VALID = {
    "name": "everything",
    "duration_s": 20,
    "traffic": [
        {"job": "ring", "gpus": 4, "collective": "ring", "message_bytes": "1GB", "iterations": 3, "compute_gap_s": 0.2},
        {"jobs": 0.5, "sizes": {2: 1}, "collectives": ["ring"]},
        {"pattern": "incast", "fan_in": 2, "protocol": "udp", "bytes": "10MB", "every_s": 4, "start_s": 1},
        {"pattern": "permutation", "on_s": 1, "off_s": 1},
        {"flows": [{"src": "ring/0", "dst": "10.0.1.1", "rate_gbps": 50, "start_s": 2, "stop_s": 5}]},
    ],
    "events": [
        {"at_s": 2, "link_down": "ryl0r0:3"},
        {"at_s": 3, "link_up": "ryl0r0:3"},
        {"at_s": 4, "switch_down": "rys1"},
        {"at_s": 5, "switch_up": "rys1"},
        {"at_s": 6, "drain": "rys0"},
        {"at_s": 7, "undrain": "rys0"},
    ],
}


def with_change(path: str, value) -> dict:
    """VALID with one value replaced (`...` deletes it); `path` is dotted, list indices as numbers."""
    doc = copy.deepcopy(VALID)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node: Any = doc
    for p in parents:
        node = node[p]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return doc


def test_every_shipped_scenario_loads_and_expands_on_its_fabric():
    assert {"elephant", "incast", "link-failure", "allreduce", "alltoall", "training-mix", "elephant-recovers"} <= set(
        available()
    )
    for name in available():
        workload = load_workload(name)
        fabric = load_fabric(SPECS_DIR / workload.fabric) if workload.fabric else DEMO
        if fabric.gpu_count > 1000:
            continue  # the large specs' scenarios are the simulator's (tests/unit/test_simulate.py)
        workload = check_events(workload, fabric)
        plan = expand(fabric, workload, 1, railyard_placer(fabric))
        assert plan.transfers and not plan.refused, name


def test_the_valid_document_parses_into_every_kind():
    workload = workload_from_dict(VALID)
    kinds = [type(item) for item in workload.traffic]
    assert kinds[:4] == [JobItem, JobMixItem, PatternItem, PatternItem]
    assert [e.kind for e in workload.events] == ["link_down", "link_up", "switch_down", "switch_up", "drain", "undrain"]
    ring = workload.traffic[0]
    assert isinstance(ring, JobItem) and ring.message_bytes == 10**9 and ring.iterations == 3


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("name", "Bad Name", "name"),
        ("name", 3, "name"),
        ("description", ["x"], "description"),
        ("duration_s", 0, "duration_s"),
        ("duration_s", 1e9, "duration_s"),
        ("duration_s", "ten", "duration_s"),
        ("duration_s", True, "duration_s"),
        ("traffic", [], "traffic"),
        ("traffic", {"pattern": "permutation"}, "traffic"),
        ("traffic.0", "ring", "traffic[0]"),
        ("traffic.0.pattern", "incast", "traffic[0]"),  # two kinds in one item
        ("traffic.0.colour", "red", "traffic[0].colour"),
        ("traffic.0.job", "Ring!", "traffic[0].job"),
        ("traffic.0.gpus", 0, "traffic[0].gpus"),
        ("traffic.0.gpus", 2.5, "traffic[0].gpus"),
        ("traffic.0.collective", "butterfly", "traffic[0].collective"),
        ("traffic.0.protocol", "sctp", "traffic[0].protocol"),
        ("traffic.0.message_bytes", "1 parsec", "traffic[0].message_bytes"),
        ("traffic.0.message_bytes", -5, "traffic[0].message_bytes"),
        ("traffic.0.message_bytes", "2PB", "traffic[0].message_bytes"),
        ("traffic.0.message_bytes", ..., "traffic[0].message_bytes"),
        ("traffic.0.iterations", -1, "traffic[0].iterations"),
        ("traffic.0.iterations", 10**9, "traffic[0].iterations"),
        ("traffic.0.compute_gap_s", -0.1, "traffic[0].compute_gap_s"),
        ("traffic.0.compute_gap_s", float("nan"), "traffic[0].compute_gap_s"),
        ("traffic.0.flow_gbps", 1e6, "traffic[0].flow_gbps"),
        ("traffic.0.start_s", 21, "traffic[0].start_s"),
        ("traffic.0.stop_s", 5, "traffic[0].stop_s"),  # with iterations
        ("traffic.0.gpus_per_server", -1, "traffic[0].gpus_per_server"),
        ("traffic.0.servers", ["a", "a"], "traffic[0].servers"),
        ("traffic.0.servers", "ryh0s0", "traffic[0].servers"),
        ("traffic.1.jobs", 1.5, "traffic[1].jobs"),
        ("traffic.1.sizes", {0: 1}, "traffic[1].sizes.0"),
        ("traffic.1.sizes", {2: -1}, "traffic[1].sizes.2"),
        ("traffic.1.sizes", [], "traffic[1].sizes"),
        ("traffic.1.collectives", ["mesh"], "traffic[1].collectives.mesh"),
        ("traffic.1.all_to_all_max_gpus", 0, "traffic[1].all_to_all_max_gpus"),
        ("traffic.1.iterations", 2, "traffic[1].message_bytes"),
        ("traffic.1.background", 0.6, "traffic[1].background"),  # with jobs 0.5: more than the fabric
        ("traffic.1.background", -0.1, "traffic[1].background"),
        ("traffic.2.pattern", "tornado", "traffic[2].pattern"),
        ("traffic.2.fan_in", 1, "traffic[2].fan_in"),
        ("traffic.2.bystander", "yes", "traffic[2].bystander"),
        ("traffic.2.servers", 4, "traffic[2].servers"),  # only for all-to-all
        ("traffic.2.rail", -1, "traffic[2].rail"),
        ("traffic.2.rate_gbps", 0, "traffic[2].rate_gbps"),
        ("traffic.2.bytes", "lots", "traffic[2].bytes"),
        ("traffic.2.every_s", 0, "traffic[2].every_s"),
        ("traffic.2.on_s", 1, "traffic[2].on_s"),  # on/off with bytes
        ("traffic.3.every_s", 2, "traffic[3].every_s"),  # every_s without bytes
        ("traffic.3.off_s", ..., "traffic[3].off_s"),
        ("traffic.4.flows", [], "traffic[4].flows"),
        ("traffic.4.flows.0.src", "10.0.0.0", "traffic[4].flows[0].src"),
        ("traffic.4.flows.0.src", "nojob/0", "traffic[4].flows[0].src"),
        ("traffic.4.flows.0.src", "ring/9", "traffic[4].flows[0].src"),
        ("traffic.4.flows.0.src", {"job": "ring", "rank": -1}, "traffic[4].flows[0].src.rank"),
        ("traffic.4.flows.0.src", 7, "traffic[4].flows[0].src"),
        ("traffic.4.flows.0.dst", ..., "traffic[4].flows[0].dst"),
        ("traffic.4.flows.0.dst", "ring/0", "traffic[4].flows[0].dst"),  # its own source
        ("traffic.4.flows.0.stop_s", 1, "traffic[4].flows[0].stop_s"),  # before its start
        ("traffic.4.flows.0.weight", 1, "traffic[4].flows[0].weight"),
        ("traffic.4.flows.0.qps_per_connection", 0, "traffic[4].flows[0].qps_per_connection"),
        ("traffic.0.qps_per_connection", 17, "traffic[0].qps_per_connection"),
        ("traffic.1.qps_per_connection", "2", "traffic[1].qps_per_connection"),
        ("traffic.3.qps_per_connection", 1.5, "traffic[3].qps_per_connection"),
        ("events", {"at_s": 1}, "events"),
        ("events.0", {"at_s": 1}, "events[0]"),
        ("events.0.at_s", 0, "events[0].at_s"),
        ("events.0.at_s", 20, "events[0].at_s"),
        ("events.0.link_down", "ryl0r0", "events[0].link_down"),
        ("events.0.link_down", {"leaf": "ryl0r0"}, "events[0].link_down"),
        ("events.2.switch_down", "Spine 1", "events[2].switch_down"),
        ("events.5.at_s", 5.5, "events[5].undrain"),  # undrain before the drain
        ("telemetry", {"interval_s": 0}, "telemetry.interval_s"),
        ("telemetry", {"noise": 2}, "telemetry.noise"),
        ("telemetry", {"jitter": 1}, "telemetry.jitter"),
        ("engine", {"warp": 1}, "engine.warp"),
        ("engine", {"max_moves_per_leaf": -1}, "engine.max_moves_per_leaf"),
        ("engine", {"max_moves_per_cycle": 4}, "engine.max_moves_per_cycle"),  # no such setting
        ("fabric", "no-such.yaml", "fabric"),
        ("colour", "red", "colour"),
    ],
)
def test_each_bad_value_is_refused_naming_its_field(path, value, field):
    with pytest.raises(WorkloadError) as caught:
        workload_from_dict(with_change(path, value))
    assert caught.value.field == field, str(caught.value)


def test_refusals_that_need_the_fabric_name_their_field():
    def refused(path, value) -> str:
        doc = with_change(path, value)
        if path.startswith("events."):
            doc["events"] = [doc["events"][int(path.split(".")[1])]]  # alone: no up without its down
        workload = workload_from_dict(doc)
        with pytest.raises(WorkloadError) as caught:
            expand(DEMO, check_events(workload, DEMO), 1, railyard_placer(DEMO))
        return caught.value.field

    assert refused("events.0.link_down", "ryh0s0:1") == "events[0].link_down"  # not an uplink
    assert refused("events.2.switch_down", "rys9") == "events[0].switch_down"
    assert refused("traffic.0.servers", ["ryh0s0", "nope"]) == "traffic[0].servers[1]"
    assert refused("traffic.2.fan_in", 9) == "traffic[2].fan_in"
    assert refused("traffic.2.rail", 7) == "traffic[2].rail"
    assert refused("traffic.4.flows.0.dst", "10.9.9.9") == "traffic[4].flows[0].dst"


def test_a_link_event_may_name_either_end_or_the_pair():
    for form in ("ryl0r0:3", "rys0:1", {"leaf": "ryl0r0", "spine": "rys0"}):
        workload = check_events(
            workload_from_dict(with_change("events.0.link_down", form) | {"events": [{"at_s": 2, "link_down": form}]}),
            DEMO,
        )
        assert workload.events[0].target == "ryl0r0:3", form


def test_expansion_gives_collective_bytes_ranks_and_unique_ports():
    workload = check_events(workload_from_dict(VALID), DEMO)
    plan = expand(DEMO, workload, 7, railyard_placer(DEMO))
    ring = plan.jobs[0]
    assert ring.job_id == "ring" and ring.iterations == 3 and ring.per_server == 2
    # 4 GPUs on 2 servers, 2 per server: 2(n-1)/n x S/k = 1.5 x 1 GB / 2 per flow.
    assert ring.flow_bytes == 750_000_000 == flow_bytes(Pattern.RING, 10**9, 4, 2)
    assert all(plan.transfers[i].bytes == ring.flow_bytes for i in ring.transfers)
    explicit = plan.transfers[-1]
    assert explicit.src == plan.placed["ring"].gpus[0] and explicit.dst == NicId(0, 1, 0)
    assert explicit.rate_bps == 50e9
    keys = [t.key for t in plan.transfers]
    assert len(set(keys)) == len(keys)
    per_receiver = [(t.dst, t.protocol, t.dst_port) for t in plan.transfers]
    assert len(set(per_receiver)) == len(per_receiver)
    assert expand(DEMO, workload, 7, railyard_placer(DEMO)).transfers == plan.transfers  # a seed is a seed


def test_queue_pairs_are_transfers_of_their_own_splitting_the_bytes_evenly():
    doc = with_change("traffic.0.qps_per_connection", 4)
    doc["traffic"][4]["flows"][0]["qps_per_connection"] = 2
    plan = expand(DEMO, check_events(workload_from_dict(doc), DEMO), 7, railyard_placer(DEMO))
    one = expand(DEMO, check_events(workload_from_dict(VALID), DEMO), 7, railyard_placer(DEMO))
    ring, ring_one = plan.jobs[0], one.jobs[0]
    assert ring.qps_per_connection == 4 and len(ring.transfers) == 4 * len(ring_one.transfers)
    assert ring.flow_bytes == -(-ring_one.flow_bytes // 4)
    qps = [plan.transfers[i] for i in ring.transfers]
    for pair in {(t.src, t.dst) for t in qps}:
        mine = [t for t in qps if (t.src, t.dst) == pair]
        assert len(mine) == 4 and len({t.src_port for t in mine}) == 4  # each hashed apart: E-ECMP
        assert all(t.bytes == ring.flow_bytes and t.via == mine[0].via for t in mine)
    explicit = plan.transfers[-2:]
    assert [t.rate_bps for t in explicit] == [25e9, 25e9] and explicit[0].src_port != explicit[1].src_port
    keys = [t.key for t in plan.transfers]
    assert len(set(keys)) == len(keys)


def test_a_queue_pair_keeps_the_source_port_its_placement_named_and_a_flow_that_drew_it_moves():
    workload = check_events(workload_from_dict(with_change("traffic.0.qps_per_connection", 2)), DEMO)
    drawn = expand(DEMO, workload, 7, railyard_placer(DEMO))
    explicit = drawn.transfers[-1]  # ring/0 -> 10.0.1.1, from the ring's first NIC
    railyard = railyard_placer(DEMO)

    def apart(request):
        """Railyard's servers, each connection's two QPs named apart as placement names them."""
        placed = railyard(request)
        if placed is None or request.job_id != "ring":
            return placed
        ports = [explicit.src_port, 0xC001]
        flows = tuple((s, d, via, ports[q]) for s, d, via, _ in placed.flows for q in range(2))
        return Placed(placed.gpus, flows)

    plan = expand(DEMO, workload, 7, apart)
    ring = [plan.transfers[i] for i in plan.jobs[0].transfers]
    assert len(ring) == len(drawn.jobs[0].transfers)
    assert all(t.src_port in (explicit.src_port, 0xC001) for t in ring)  # as named, not drawn
    moved = plan.transfers[-1]
    assert moved.src == explicit.src and moved.src_port != explicit.src_port  # its sender binds each port once
    sending = [(t.src, t.protocol, t.src_port) for t in plan.transfers]
    assert len(set(sending)) == len(sending)
    others = [(a.key, b.key) for a, b in zip(drawn.transfers, plan.transfers) if not a.job and a is not explicit]
    assert others and all(a == b for a, b in others)  # nobody else's ports move


def test_bus_bandwidth_factors_and_flow_bytes_follow_nccl():
    assert flow_bytes(Pattern.ALL_TO_ALL, 8 * 10**9, 8, 2) == 2 * 10**9  # k x S/n
    assert flow_bytes(Pattern.TREE, 8 * 10**9, 8, 2) == 4 * 10**9  # S/k each way
    plan = expand(THREE_POD, load_workload("training-mix"), 1, railyard_placer(THREE_POD))
    ring, moe = plan.jobs
    assert ring.busbw_factor == pytest.approx(4 / 3) and moe.busbw_factor == pytest.approx(2 / 3)


def test_a_malformed_scenario_is_one_line_with_exit_status_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntraffic:\n  - pattern: permutation\n    fan_in: 3\n")
    assert main(["scenario", "run", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "traffic[0].fan_in" in err, err


def test_a_mix_in_a_cluster_in_use_works_around_servers_already_held():
    doc = with_change("traffic.1.background", 0.5)
    doc["traffic"] = [doc["traffic"][1]]  # the mix alone: jobs 0.5, background 0.5
    plan = expand(THREE_POD, workload_from_dict(doc), 4, railyard_placer(THREE_POD))
    held = {job: placed for job, placed in plan.placed.items() if job.startswith("held-")}
    assert len(held) == 3  # half of the six servers, one job each, none with a flow on the fabric
    servers = [{(nic.pod, nic.server) for nic in p.gpus} for p in held.values()]
    assert all(len(s) == 1 for s in servers) and len(set().union(*servers)) == 3
    assert all(not p.flows for p in held.values())
    mix = [p for job, p in plan.placed.items() if not job.startswith("held-")]
    assert mix and all({(n.pod, n.server) for n in p.gpus}.isdisjoint(set().union(*servers)) for p in mix)


def test_a_link_may_go_down_and_up_under_either_name_but_not_down_twice():
    def events(*pairs):
        doc = copy.deepcopy(VALID)
        doc["events"] = [{"at_s": 2 + k, kind: target} for k, (kind, target) in enumerate(pairs)]
        return check_events(workload_from_dict(doc), DEMO)

    ok = events(("link_down", "ryl0r0:3"), ("link_up", {"leaf": "ryl0r0", "spine": "rys0"}))
    assert [e.target for e in ok.events] == ["ryl0r0:3", "ryl0r0:3"]
    with pytest.raises(WorkloadError) as err:
        events(("link_down", "ryl0r0:3"), ("link_down", "rys0:1"))  # the same link from its other end
    assert err.value.field == "events[1].link_down"
    with pytest.raises(WorkloadError) as err:
        events(("link_up", "ryl0r0:3"))  # up before any down
    assert err.value.field == "events[0].link_up"


def test_windows_and_sizes_at_their_limits():
    from emulation.workload.model import Window

    assert len(Window(0, None, every_s=0.1).bursts(1.0)) == 10  # not 11: no float drift past the end
    assert len(Window(0, None, every_s=0.3).bursts(0.9)) == 3
    assert Window(1, None, on_s=2, off_s=2).bursts(20)[-1] == (17, 19)
    for path, value, field in (
        ("traffic.2.every_s", 1e-6, "traffic[2].every_s"),
        ("traffic.2.bytes", "9" * 400, "traffic[2].bytes"),
        ("traffic.4.flows.0.src", "ring/\u00b2", "traffic[4].flows[0].src"),
        ("traffic.0.start_s", 20, "traffic[0].start_s"),
        ("events", {}, "events"),
    ):
        with pytest.raises(WorkloadError) as err:
            workload_from_dict(with_change(path, value))
        assert err.value.field == field, (path, str(err.value))


def test_expansion_refuses_what_cannot_be_honoured_naming_the_field():
    def refused(doc) -> str:
        with pytest.raises(WorkloadError) as err:
            expand(DEMO, workload_from_dict(doc), 1, railyard_placer(DEMO))
        return err.value.field

    base = {"name": "x", "duration_s": 10}
    assert refused({**base, "traffic": [{"job": "a", "gpus": 8}, {"job": "b", "gpus": 8}]}) == "traffic[1].gpus"
    assert (
        refused({**base, "traffic": [{"pattern": "incast", "fan_in": 2, "bystander": True}]}) == "traffic[0].bystander"
    )
    assert refused({**base, "traffic": [{"pattern": "permutation", "rate_gbps": 800}]}) == "traffic[0].rate_gbps"


def test_receivers_never_share_a_port_however_many_flows():
    doc = {
        "name": "crowd",
        "fabric": "three-pod.yaml",
        "traffic": [
            *({"pattern": "all-to-all", "servers": 6} for _ in range(4)),  # 4 x 60 TCP flows
            {"pattern": "incast", "rail": 1, "fan_in": 3, "bystander": True},
            {"pattern": "incast", "rail": 1, "fan_in": 3, "bystander": True},
        ],
    }
    plan = expand(THREE_POD, workload_from_dict(doc), 1, railyard_placer(THREE_POD))
    listening = [(t.dst, t.protocol, t.dst_port) for t in plan.transfers]
    assert len(plan.transfers) > 240 and len(set(listening)) == len(listening)
    assert len({t.key for t in plan.transfers}) == len(plan.transfers)
    assert sum(t.role == "bystander" for t in plan.transfers) == 2
