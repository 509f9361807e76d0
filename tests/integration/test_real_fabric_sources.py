"""What a real fabric offers the controller, on real Open vSwitch: its own
sFlow agent (TE on it alone), its OpenFlow statistics, an underlay the
controller installs on a fabric brought up bare, and the advisory mode that
programs nothing and says what TE would do."""

from __future__ import annotations

import contextlib
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.fabric import NicId
from controller.fabric import addressing as ad
from controller.southbound.underlay import Ecmp, build_underlay
from emulation.agent.telemetry_agent import TelemetryAgent
from emulation.net import netns, ovs
from emulation.net.fabric import EmulatedFabric, sflow_sampling
from emulation.processes.controller_process import ControllerProcess, Ports, free_port, total
from emulation.traffic.counters import ecmp_uplink
from emulation.traffic.iperf import FlowSpec, TrafficRun
from tests.integration.helpers import railyard_entries, uplink_bytes, window

LEAF = "ryl0r0"
A, B = NicId(0, 0, 0), NicId(0, 0, 1)  # both below ryl0r0 (rail 0, pod 0)
A2, B2 = NicId(0, 1, 0), NicId(0, 1, 1)  # their twins in pod 1


def colliding_pair(fabric) -> list[FlowSpec]:
    """Two TCP elephants from ryl0r0 that its own hash puts on one uplink."""
    first = FlowSpec(A, A2, "tcp", 40000, 5201)
    uplink = ecmp_uplink(fabric, first)
    for port in range(40001, 40200):
        second = FlowSpec(B, B2, "tcp", port, 5202)
        if ecmp_uplink(fabric, second) == uplink:
            return [first, second]
    raise AssertionError("no colliding source port in 200")


@contextlib.contextmanager
def fabric_and_daemon(
    fabric, workdir: Path, *args: str, sflow: bool = False, bare: bool = False, wait_switches: bool = True
) -> Iterator[tuple[EmulatedFabric, ControllerProcess]]:
    ports = Ports.pick()
    extra = list(args)
    export = None
    if sflow:
        target = f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}"
        extra += ["--sflow-listen", target]
        export = ovs.SflowExport(target, sflow_sampling(fabric))
    ctl = ControllerProcess(
        None,
        workdir / "intent.db",
        ports,
        workdir / "controller.log",
        reconcile_interval_s=1.0,
        extra_args=tuple(extra),
    )
    with EmulatedFabric(fabric, controller=ports.controller_target, bare=bare, sflow=export) as emu:
        ctl.start()
        try:
            if wait_switches:
                ctl.wait_ready(len(fabric.switches))
            else:
                ctl.wait_serving_api()
            yield emu, ctl
        finally:
            ctl.stop()


def te_entries_on(switch: str) -> dict[str, dict]:
    return {m: e for m, e in railyard_entries(switch).items() if e["cookie"] >> 40 & 0xFF == 3}


def wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout_s:g} s: {what}")


def test_te_on_the_switches_own_sflow_alone_splits_a_collision(demo_fabric, tmp_path):
    with fabric_and_daemon(demo_fabric, tmp_path, sflow=True) as (emu, ctl):
        flows = colliding_pair(demo_fabric)
        traffic = TrafficRun(emu.popen, flows, 8.0).start()
        try:
            # No agent process: what TE knows of the flows is what the switches' sFlow said.
            wait_for(lambda: te_entries_on(LEAF), 6.0, "TE steering one of the collided elephants")
            before, after = window(demo_fabric, 2.0)
        finally:
            traffic.wait(grace_s=5.0)
        samples = ctl.metrics()
    assert total(samples, "railyard_sflow_datagrams_total", result="accepted") > 0
    assert total(samples, "railyard_sflow_samples_total", result="accepted") > 0
    assert total(samples, "railyard_te_decisions_total", kind="reroute") >= 1
    for refused in ("unknown_agent", "sequence", "truncated", "version"):
        assert total(samples, "railyard_sflow_datagrams_total", result=refused) == 0, refused
    sent = uplink_bytes(before, after, LEAF)
    assert min(sent.values()) > 0.3 * max(sent.values()), f"both uplinks carry an elephant now: {sent}"


def test_openflow_statistics_give_loads_and_link_state_with_no_agent(demo_fabric, tmp_path):
    with fabric_and_daemon(demo_fabric, tmp_path, "--openflow-stats-interval", "0.5") as (emu, ctl):
        flow = FlowSpec(A, A2, "udp", 41000, 5201, rate_bps=0.8 * demo_fabric.access_link(A).emulated_bps)
        uplink = ecmp_uplink(demo_fabric, flow)
        assert uplink is not None
        traffic = TrafficRun(emu.popen, [flow], 4.0).start()
        try:
            time.sleep(2.5)
            with ctl.client() as client:
                directions = [d for link in client.list_links(switch=LEAF) for d in link.directions]
        finally:
            traffic.wait(grace_s=5.0)
        (busy,) = [d for d in directions if d.from_node == LEAF and d.from_port == uplink.port]
        assert 0.6 < busy.measured_bps / demo_fabric.link_at(uplink).capacity_bps < 1.05, busy
        # A port that loses carrier is reported at once (its port-status message), and TE hears it.
        intf = ad.switch_port_name(LEAF, uplink.port)
        netns.run(None, ["ip", "link", "set", intf, "down"])
        try:
            wait_for(
                lambda: total(ctl.metrics(), "railyard_te_decisions_total", kind="link-down") >= 1,
                2.0,
                "TE told the link is down",
            )
        finally:
            netns.run(None, ["ip", "link", "set", intf, "up"])
        samples = ctl.metrics()
    assert total(samples, "railyard_openflow_stats_polls_total", result="ok") >= len(demo_fabric.switches) * 3
    assert total(samples, "railyard_openflow_stats_polls_total", result="failed") == 0


def underlay_on(switch: str) -> tuple[list[str], list[str]]:
    flows = [line for line in ovs.dump_flows(switch) if "priority=3000" in line or "priority=2000" in line or
             "priority=1000" in line]  # fmt: skip
    return flows, ovs.dump_groups(switch)


@pytest.mark.parametrize("ecmp", list(Ecmp))
def test_the_controller_installs_the_underlay_keeps_it_across_kill_9_and_leaves_it_forwarding(
    demo_fabric, tmp_path, ecmp
):
    tables, grouped = build_underlay(demo_fabric, ecmp), build_underlay(demo_fabric)
    with fabric_and_daemon(demo_fabric, tmp_path, "--underlay", ecmp.value, "--no-te", bare=True) as (emu, ctl):
        for name, table in tables.items():
            flows, groups = underlay_on(name)
            assert len(flows) == len(table.routes) and len(groups) == len(table.groups), name
            assert all("cookie=0x5259" in line for line in flows), "the underlay's own cookie owner"
            # The leaves spread over their spines, by the switch's groups or by Open vSwitch's bundle action.
            spread = "group:" if ecmp is Ecmp.GROUP else "bundle(symmetric_l3l4+udp,"
            assert any(spread in line for line in flows) == bool(grouped[name].groups), (name, flows)
        installed = total(ctl.metrics(), "railyard_flow_mods_total")
        assert installed == sum(len(t.routes) for t in tables.values())
        # kill -9 and a restart: everything is right already, nothing is sent.
        ctl.kill()
        ctl.start()
        samples = ctl.wait_ready(len(demo_fabric.switches))
        assert total(samples, "railyard_flow_mods_total") == 0
        assert total(samples, "railyard_group_mods_total") == 0
        # The controller gone, the switches (fail_mode=secure) keep forwarding on ECMP.
        ctl.stop()
        flow = FlowSpec(A, A2, "tcp", 40000, 5201)
        results = TrafficRun(emu.popen, [flow], 3.0).start().wait(grace_s=5.0)
    (result,) = results
    goodput = sum(result.interval_bps[1:]) / max(len(result.interval_bps) - 1, 1)
    assert goodput > 0.8 * demo_fabric.access_link(A).emulated_bps, result


def remote_routes(leaf: str) -> list[str]:
    """The leaf's underlay routes to other leaves' prefixes (its own NICs' /32s left out)."""
    return [line for line in underlay_on(leaf)[0] if "priority=1000" in line]


def test_the_controllers_underlay_keeps_unpinned_traffic_off_the_uplinks_a_placed_job_fills(demo_fabric, tmp_path):
    """A ring over two pods at the NICs' rate fills one uplink of each of its
    leaves: the controller's hash leaves it out for everything else (but for
    a dead link, known from a port-status message or, after a restart, from
    the port's description), and takes it back when the job is released."""
    with fabric_and_daemon(demo_fabric, tmp_path, "--underlay", "ovs-bundle", "--no-te", bare=True) as (_, ctl):
        assert all("bundle(" in line for line in remote_routes(LEAF))
        with ctl.client() as client:
            client.place_job("ring", 4, "ring", 400.0, 2, servers=["ryh0s0", "ryh1s0"])
            (flow,) = [f for f in client.job_flows("ring") if f.src_address == ad.nic_ip(A)]
            (filled,) = demo_fabric.steering_hops(A, A2, flow.spine)
            (free,) = [u.port for u in demo_fabric.uplinks(LEAF) if u != filled]
            wait_for(
                lambda: all(line.endswith(f"actions=dec_ttl,output:{free}") for line in remote_routes(LEAF)),
                5.0,
                f"{LEAF}'s routes to other leaves leaving by port {free} alone",
            )
            # The port kept dies: the filled one takes the traffic again (its port-status message), and
            # gives it back when the link returns.
            intf = ad.switch_port_name(LEAF, free)
            netns.run(None, ["ip", "link", "set", intf, "down"])
            try:
                wait_for(lambda: all("bundle(" in line for line in remote_routes(LEAF)), 5.0, "the hash on both")
                # A controller started while the link is down gets no port-status message for it: it reads
                # the port's description, and does not put the hash back on the dead port alone.
                ctl.kill()
                ctl.start()
                ctl.wait_ready(len(demo_fabric.switches))
                assert all("bundle(" in line for line in remote_routes(LEAF)), remote_routes(LEAF)
            finally:
                netns.run(None, ["ip", "link", "set", intf, "up"])
            wait_for(lambda: all(line.endswith(f"output:{free}") for line in remote_routes(LEAF)), 5.0, "kept again")
            client.release_job("ring")
            wait_for(lambda: all("bundle(" in line for line in remote_routes(LEAF)), 5.0, "the hash back on both")


def test_advisory_mode_recommends_the_move_te_makes_and_touches_nothing(demo_fabric, tmp_path):
    """--southbound none on the demo's collision: the recommendation is the
    move TE makes when it may program, and the switches keep every entry."""
    recommended = _first_move(demo_fabric, tmp_path / "advisory", "--southbound", "none")
    made = _first_move(demo_fabric, tmp_path / "programs")
    assert recommended["programmed"] is False and made["programmed"] is True
    # Of two elephants on one uplink either may be picked (the two runs' records differ by their
    # noise): the move is the same if it takes the same uplink's load to the same via.
    assert recommended["flow"] in recommended["pair"] and made["flow"] in made["pair"]
    assert (recommended["from_via"], recommended["to_via"]) == (made["from_via"], made["to_via"])


_COUNTERS = re.compile(r"\b(duration|n_packets|n_bytes|idle_age|hard_age)=[^,\s]*,?\s*")


def entries(switch: str) -> set[str]:
    """A switch's flow table without its counters: what it would forward."""
    return {_COUNTERS.sub("", line) for line in ovs.dump_flows(switch)} | set(ovs.dump_groups(switch))


def _first_move(fabric, workdir: Path, *args: str) -> dict:
    workdir.mkdir()
    advisory = "none" in args
    with fabric_and_daemon(fabric, workdir, *args, wait_switches=not advisory) as (emu, ctl):
        entries_before = {name: entries(name) for name in fabric.switches}
        agent = TelemetryAgent(fabric, f"127.0.0.1:{ctl.ports.grpc}").start()
        flows = colliding_pair(fabric)
        traffic = TrafficRun(emu.popen, flows, 6.0).start()
        try:
            with ctl.client() as client:
                stream = client.watch_decisions(include_recent=True, timeout_s=8.0)
                move = next(r.decision for r in stream if r.decision.kind == "reroute")
                stream.cancel()
            if advisory:
                time.sleep(1.0)  # a second more of TE: still nothing on the switches
                assert {name: entries(name) for name in fabric.switches} == entries_before
                assert not any(railyard_entries(name) for name in fabric.switches)
                assert total(ctl.metrics(), "railyard_te_moves_by_via", via=move.to_via) >= 1
        finally:
            traffic.wait(grace_s=5.0)
            agent.stop()
    flow = (move.flow.src_address, move.flow.dst_address, move.flow.src_port, move.flow.dst_port)
    pair = {(ad.nic_ip(f.src), ad.nic_ip(f.dst), f.src_port, f.dst_port) for f in flows}
    return {"flow": flow, "pair": pair, "from_via": move.from_via, "to_via": move.to_via, "programmed": move.programmed}


@pytest.fixture(autouse=True)
def _no_stray_bridges():
    yield
    leftover = [b for b, owner in ovs.railyard_bridges().items() if owner == "demo"]
    assert not leftover, f"bridges left behind: {leftover}"
