"""Three controller replicas on a three-member etcd, all connected to every
switch of the emulated fabric: one leads (OpenFlow MASTER), two follow
(SLAVE). Killing the leader (kill -9) under TCP elephants that TE has moved
elects another within the lease, keeps every flow moving, sends no
flow-mod, and loses no placement; a leader cut off from etcd steps down,
and the switches refuse its generation."""

from __future__ import annotations

import contextlib
import csv
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from os_ken.ofproto import ofproto_protocol, ofproto_v1_3
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.api.client import Client
from controller.api.gen.railyard.v1 import placement_pb2 as ppb
from controller.api.gen.railyard.v1 import placement_pb2_grpc as ppb_grpc
from controller.intent.etcd_store import EtcdKv, EtcdUrl
from emulation.agent.telemetry_agent import TelemetryAgent
from emulation.model.pairs import permutation_pairs
from emulation.net.fabric import EmulatedFabric
from emulation.processes.controller_process import ControllerProcess, Ports, total
from emulation.processes.etcd_local import LocalEtcd
from emulation.traffic.iperf import TrafficRun, make_flows

FLOW_MODS = "railyard_flow_mods_total"
ELEPHANT_SEED = 3  # a seed whose ECMP hash collides on the demo fabric (the demo's)


class Replicas:
    def __init__(self, etcd: LocalEtcd, tmp: Path, count: int = 3, prefix: str = "ha") -> None:
        self.ports = [Ports.pick() for _ in range(count)]
        self.procs = [
            ControllerProcess(
                None,
                tmp / f"unused-{i}.db",
                ports,
                tmp / f"replica-{i}.log",
                extra_args=("--store", etcd.store_url(prefix), "--advertise", f"127.0.0.1:{ports.grpc}"),
            )
            for i, ports in enumerate(self.ports)
        ]

    @property
    def targets(self) -> str:
        return ",".join(f"127.0.0.1:{p.grpc}" for p in self.ports)

    @property
    def openflow_targets(self) -> str:
        return ",".join(p.controller_target for p in self.ports)

    def alive(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p.proc is not None and p.proc.poll() is None]

    def leaders(self) -> list[int]:
        found = []
        for i in self.alive():
            try:
                if total(self.procs[i].metrics(), "railyard_leader") == 1:
                    found.append(i)
            except OSError:
                pass
        return found

    def wait_leader(self, timeout_s: float = 15.0, poll_s: float = 0.05) -> int:
        deadline = time.monotonic() + timeout_s
        while True:
            leaders = self.leaders()
            assert len(leaders) <= 1, f"two leaders at once: {leaders}"
            if leaders:
                return leaders[0]
            assert time.monotonic() < deadline, "no leader elected"
            time.sleep(poll_s)

    def wait_programmed(self, leader: int, switches: int, timeout_s: float = 20.0) -> dict:
        """Until the leader holds every switch and a pass since it took them ended in sync."""
        deadline = time.monotonic() + timeout_s
        while True:
            samples = self.procs[leader].metrics()
            ok = total(samples, "railyard_reconcile_runs_total", result="ok")
            if total(samples, "railyard_switches_connected") == switches and ok >= 1:
                return samples
            assert time.monotonic() < deadline, "the leader did not reconcile the fabric"
            time.sleep(0.1)


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    with LocalEtcd(members=3, workdir=tmp_path_factory.mktemp("etcd")) as cluster:
        yield cluster


def test_kill_9_of_the_leader_under_te_moved_elephants(demo_fabric, etcd, tmp_path):
    replicas = Replicas(etcd, tmp_path)
    switches = len(demo_fabric.switches)
    with EmulatedFabric(demo_fabric, controller=replicas.openflow_targets) as emu:
        for proc in replicas.procs:
            proc.start()
        agent = None
        try:
            leader = replicas.wait_leader()
            replicas.wait_programmed(leader, switches)
            agent = TelemetryAgent(demo_fabric, replicas.targets).start()  # to every replica
            flows = make_flows(permutation_pairs(demo_fabric), "tcp", seed=ELEPHANT_SEED)
            run = TrafficRun(emu.popen, flows, duration_s=20).start()
            try:
                # Three replicas and the agent on a shared machine: TE's first move can take a while.
                deadline = time.monotonic() + 12
                while total(replicas.procs[leader].metrics(), "railyard_te_moves_active") == 0:
                    assert time.monotonic() < deadline, "TE moved no elephant"
                    time.sleep(0.2)
                time.sleep(1.5)  # the moves are on the switches
                with Client(replicas.targets) as client:
                    client.place_job("placed-before", 2, "ring", request_id="before-1")
                    time.sleep(0.1)
                    raced: dict[str, object] = {}

                    def race() -> None:
                        try:
                            with Client(replicas.targets) as racer:
                                raced["reply"] = racer.place_job("racing", 2, "ring", request_id="race-1")
                        except grpc.RpcError as exc:
                            raced["error"] = exc

                    racer = threading.Thread(target=race)
                    racer.start()
                    killed_at = time.monotonic()
                    replicas.procs[leader].kill()
                    racer.join(timeout=30)
                    new_leader = replicas.wait_leader(poll_s=0.02)
                    elected_s = time.monotonic() - killed_at
                    samples = replicas.wait_programmed(new_leader, switches)
                    time.sleep(3)  # a few TE cycles and periodic passes on the new leader
                    after = replicas.procs[new_leader].metrics()

                    jobs = {job.job_id for job in client.list_jobs()}
                    retry = client.place_job("racing", 2, "ring", request_id="race-1") if "racing" in jobs else None
            finally:
                results = run.wait()
        finally:
            if agent is not None:
                agent.stop()
            for proc in replicas.procs:
                proc.stop()

    decided = {dict(ls)["kind"]: v for (n, ls), v in after.items() if n == "railyard_te_decisions_total" and v}
    race_outcome = "placed" if "reply" in raced else f"failed ({getattr(raced.get('error'), 'code', lambda: '?')()})"
    print(
        f"new leader {elected_s:.2f} s after kill -9; takeover flow-mods {total(after, FLOW_MODS):g}; "
        f"racing placement {race_outcome}, {'present' if 'racing' in jobs else 'absent'} after; "
        f"the new leader's TE decisions {decided or 'none'}"
    )
    assert new_leader != leader
    assert elected_s <= 3.0, f"a new leader only after {elected_s:.2f} s"
    assert total(samples, "railyard_reconcile_runs_total", trigger="role", result="ok") >= 1
    assert total(samples, FLOW_MODS) == 0, "the takeover pass rewrote entries the old leader left correct"
    # Later flow-mods are the new leader's own TE decisions (a move that ends, a new
    # collision seen through telemetry slowed by the load), never silent rewrites.
    sent = {"{switch}/{kind}".format(**dict(ls)): v for (n, ls), v in after.items() if n == FLOW_MODS and v}
    programs = {"reroute", "expire", "revert", "incast", "link-down"}
    assert not sent or programs & set(decided), f"flow-mods {sent} after the takeover; TE decided {decided}"
    assert total(after, "railyard_te_moves_active") >= 1, "the new leader did not adopt the TE moves"
    for result in results:
        assert not result.error and len(result.interval_bps) >= 14, result
        assert min(result.interval_bps) > 0, f"{result.flow.five_tuple} at zero: {result.interval_bps}"
    assert "placed-before" in jobs
    # The racing placement is durable (and a retry returns it, not a second
    # one) or it failed; it is never half there.
    if "reply" in raced:
        assert "racing" in jobs
    if "racing" in jobs:
        assert retry is not None and not retry.created and len(retry.job.gpus) == 2
    else:
        assert isinstance(raced.get("error"), grpc.RpcError)


def test_a_follower_refuses_a_mutation_naming_the_leader_and_the_client_follows(demo_fabric, etcd, tmp_path):
    replicas = Replicas(etcd, tmp_path, count=2, prefix="follow")
    for proc in replicas.procs:
        proc.start()
    try:
        leader = replicas.wait_leader()
        follower = 1 - leader
        channel = grpc.insecure_channel(f"127.0.0.1:{replicas.ports[follower].grpc}")
        request = ppb.PlaceJobRequest(job_id="on-follower", gpu_count=2, pattern=ppb.COLLECTIVE_PATTERN_RING)
        deadline = time.monotonic() + 3
        while True:  # until the follower has seen who won (its next look at etcd, 0.1 s)
            with pytest.raises(grpc.RpcError) as err:
                ppb_grpc.PlacementServiceStub(channel).PlaceJob(request, timeout=5)  # a bare stub: it does not follow
            assert isinstance(err.value, grpc.Call)
            trailers = dict(err.value.trailing_metadata() or ())
            if trailers.get("railyard-leader") or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        channel.close()
        assert trailers.get("railyard-leader") == f"127.0.0.1:{replicas.ports[leader].grpc}"
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert f"the leader is at 127.0.0.1:{replicas.ports[leader].grpc}" in (err.value.details() or "")
        for index, expected in ((leader, 0), (follower, 1)):  # the leader-only readiness probe
            probe = subprocess.run(
                [sys.executable, "-m", "controller.cli", "health", "--service", "railyard.leader",
                 "--target", f"127.0.0.1:{replicas.ports[index].grpc}"],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert probe.returncode == expected, probe.stdout + probe.stderr
        with Client(f"127.0.0.1:{replicas.ports[follower].grpc}") as following:
            assert following.place_job("via-follower", 2, "ring").created  # sent again to the leader
            deadline = time.monotonic() + 5
            with replicas.procs[follower].client() as reader:
                while "via-follower" not in {j.job_id for j in reader.list_jobs()}:
                    assert time.monotonic() < deadline, "the follower's reads did not catch up"
                    time.sleep(0.05)
    finally:
        for proc in replicas.procs:
            proc.stop()


class Proxy:
    """A TCP relay to one etcd member that the test can cut: the replica
    behind it loses etcd while keeping its OpenFlow connections."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.cut_event = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.cut_event.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.cut_event.is_set():
                client.close()
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            self.sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass

    def cut(self) -> None:
        self.cut_event.set()
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def controller_roles(bridge: str) -> dict[str, str]:
    """Each OpenFlow controller target of `bridge` -> the role the switch gave its connection."""
    uuids = subprocess.run(["ovs-vsctl", "get", "bridge", bridge, "controller"], capture_output=True, text=True)
    roles = {}
    for uuid in uuids.stdout.strip("[]\n").split(", "):
        listed = subprocess.run(
            ["ovs-vsctl", "--format=csv", "--data=bare", "--no-headings", "--columns=target,role", "list", "controller",
             uuid],
            capture_output=True, text=True,
        )  # fmt: skip
        target, role = next(csv.reader([listed.stdout.strip()]))
        roles[target] = role
    return roles


def wait_roles(bridge: str, want: dict[str, str], timeout_s: float = 15.0) -> None:
    """Until the switch reports these roles (ovs-vswitchd writes connection
    status to its database every few seconds, not at once)."""
    deadline = time.monotonic() + timeout_s
    while True:
        roles = controller_roles(bridge)
        if all(roles.get(target) == role for target, role in want.items()):
            return
        assert time.monotonic() < deadline, f"roles on {bridge}: {roles}, expected {want}"
        time.sleep(0.5)


def openflow_client(bridge: str) -> socket.socket:
    """A bare OpenFlow connection from `bridge`: an extra controller target
    the test listens on, after the HELLO exchange."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    current = subprocess.run(["ovs-vsctl", "get-controller", bridge], capture_output=True, text=True).stdout.split()
    subprocess.run(["ovs-vsctl", "set-controller", bridge, *current, f"tcp:127.0.0.1:{port}"], check=True)
    listener.settimeout(15)
    conn, _ = listener.accept()
    listener.close()
    conn.settimeout(5)
    conn.sendall(struct.pack("!BBHI", 4, 0, 8, 1))  # HELLO
    return conn


def exchange(conn: socket.socket, message) -> tuple[int, bytes]:
    """Sends an os-ken message with a barrier behind it; (type, body) of the
    switch's answer to the message, or the barrier's reply if it sent none."""
    message.set_xid(77)
    message.serialize()
    barrier = parser.OFPBarrierRequest(message.datapath)
    barrier.set_xid(78)
    barrier.serialize()
    conn.sendall(bytes(message.buf) + bytes(barrier.buf))
    buffer, answer = b"", None
    while True:
        while len(buffer) < 8 or len(buffer) < struct.unpack_from("!H", buffer, 2)[0]:
            buffer += conn.recv(65536)
        _, kind, length, xid = struct.unpack_from("!BBHI", buffer)
        body, buffer = buffer[8:length], buffer[length:]
        if xid == 77:
            answer = (kind, body)
        if xid == 78:  # the switch handles a connection's messages in order: nothing more to come
            return answer or (kind, body)


def test_a_leader_cut_off_from_etcd_steps_down_and_the_switches_refuse_its_generation(demo_fabric, etcd, tmp_path):
    proxy = Proxy(etcd.members[0].client_port)
    first = Ports.pick()
    second = Ports.pick()
    cut_off = ControllerProcess(
        None, tmp_path / "a.db", first, tmp_path / "a.log",
        extra_args=("--store", f"etcd://127.0.0.1:{proxy.port}/isolate", "--advertise", f"127.0.0.1:{first.grpc}"),
    )  # fmt: skip
    other = ControllerProcess(
        None, tmp_path / "b.db", second, tmp_path / "b.log",
        extra_args=("--store", etcd.store_url("isolate"), "--advertise", f"127.0.0.1:{second.grpc}"),
    )  # fmt: skip
    bridge = "ryl0r0"
    with EmulatedFabric(demo_fabric, controller=f"{first.controller_target},{second.controller_target}"):
        cut_off.start()
        try:
            cut_off.wait_serving_api()
            deadline = time.monotonic() + 15
            while total(cut_off.metrics(), "railyard_leader") != 1:
                assert time.monotonic() < deadline, "the first replica did not lead"
                time.sleep(0.1)
            other.start()
            other.wait_serving_api()
            wait_roles(bridge, {first.controller_target: "master", second.controller_target: "slave"})

            proxy.cut()
            cut_at = time.monotonic()
            while total(cut_off.metrics(), "railyard_leader") != 0:
                assert time.monotonic() - cut_at < 2.0, "the cut-off leader did not step down within the lease TTL"
                time.sleep(0.05)
            stepped_down_s = time.monotonic() - cut_at
            while total(other.metrics(), "railyard_leader") != 1:
                assert time.monotonic() - cut_at < 6.0, "the other replica did not take over"
                time.sleep(0.05)
            wait_roles(bridge, {first.controller_target: "slave", second.controller_target: "master"})

            # What a deposed leader's connection can still do: nothing. A claim
            # with an old generation is refused as stale, and a slave's
            # flow-mod is refused.
            conn = openflow_client(bridge)
            datapath = ofproto_protocol.ProtocolDesc(ofproto_v1_3.OFP_VERSION)
            kind, body = exchange(conn, parser.OFPRoleRequest(datapath, ofproto_v1_3.OFPCR_ROLE_MASTER, 1))
            assert (kind, struct.unpack_from("!HH", body)) == (
                ofproto_v1_3.OFPT_ERROR,
                (ofproto_v1_3.OFPET_ROLE_REQUEST_FAILED, ofproto_v1_3.OFPRRFC_STALE),
            )
            leader_key = EtcdKv(EtcdUrl.parse(etcd.store_url("isolate"))).get("isolate/leader")
            assert leader_key is not None
            generation = int(leader_key["create_revision"])  # the current leader's: this connection follows it
            kind, _ = exchange(conn, parser.OFPRoleRequest(datapath, ofproto_v1_3.OFPCR_ROLE_SLAVE, generation))
            assert kind == ofproto_v1_3.OFPT_ROLE_REPLY
            late = parser.OFPFlowMod(
                datapath,
                cookie=0x5259 << 48,
                priority=40000,
                match=parser.OFPMatch(eth_type=0x0800, ipv4_dst="10.9.9.9"),
            )
            kind, body = exchange(conn, late)
            assert (kind, struct.unpack_from("!HH", body)) == (
                ofproto_v1_3.OFPT_ERROR,
                (ofproto_v1_3.OFPET_BAD_REQUEST, ofproto_v1_3.OFPBRC_IS_SLAVE),
            )
            conn.close()
            flows = subprocess.run(
                ["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge], capture_output=True, text=True
            )
            assert "10.9.9.9" not in flows.stdout
        finally:
            cut_off.stop()
            other.stop()
    print(f"the cut-off leader stepped down {stepped_down_s:.2f} s after losing etcd")
