"""What a hostile peer can do to the daemon's listeners (real daemon, real
TLS handshakes, no fabric): hold connections open without a word, send a
flood of calls without credentials, fail handshakes. The legitimate client
is still served within a second, and the log and audit file barely grow."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import struct
import time
from pathlib import Path

import grpc
import pytest

from controller.api.client import Client, ClientTls
from controller.api.gen.railyard.v1 import placement_pb2 as ppb
from controller.api.gen.railyard.v1 import placement_pb2_grpc as ppb_grpc
from controller.api.gen.railyard.v1 import telemetry_pb2 as tpb
from controller.security import certs, tokens
from emulation.processes.controller_process import Samples, free_port, parse_metrics, total
from tests.integration.helpers import api_daemon, client_tls, mutual_tls_args

POLICY = "identities:\n  scheduler: scheduler\n  agent: agent\n  operator: operator\n  extender: scheduler\n"
HOSTS = Path(__file__).parent.parent / "data" / "exports" / "demo-hosts.yaml"
IDLE_PER_LISTENER = 4
OFPT_HELLO = struct.pack("!BBHI", 4, 0, 8, 1)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    certs.init_dir(directory)
    (directory / "policy.yaml").write_text(POLICY)
    tokens.add_token(directory, "extender")
    return directory


@pytest.fixture(scope="module")
def daemon(pki, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("listeners")
    token_port, extender_port = free_port(), free_port()
    args = (
        *mutual_tls_args(pki, pki / "policy.yaml"),
        *("--audit-log", str(tmp / "audit.jsonl")),
        *("--tokens", str(pki / "tokens.yaml"), "--grpc-token-listen", f"127.0.0.1:{token_port}"),
        *("--hosts", str(HOSTS), "--extender-listen", f"127.0.0.1:{extender_port}"),
        "--metrics-client-certs",
    )
    with api_daemon(tmp, *args, tls=client_tls(pki, "operator")) as ctl:
        ctl.token_port, ctl.extender_port = token_port, extender_port  # type: ignore[attr-defined]
        yield ctl


def tls_context(pki: Path, who: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.check_hostname = False
    if who is not None:
        context.load_cert_chain(pki / f"{who}.crt", pki / f"{who}.key")
    return context


def https_get(port: int, path: str, context: ssl.SSLContext) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def metrics(daemon, pki: Path) -> Samples:
    """/metrics as Prometheus scrapes it here: with its client certificate (--metrics-client-certs)."""
    status, body = https_get(daemon.ports.metrics, "/metrics", tls_context(pki, "prometheus"))
    assert status == 200
    return parse_metrics(body.decode())


def served(daemon, pki: Path) -> dict[str, float]:
    """Seconds each listener's legitimate client took to be answered."""
    took = {}
    started = time.monotonic()
    with daemon.client(client_tls(pki, "scheduler")) as client:
        client.list_jobs()
    took["grpc"] = time.monotonic() - started

    started = time.monotonic()
    with Client(
        f"127.0.0.1:{daemon.token_port}", tls=ClientTls.with_token(pki / "ca.crt", pki / "extender.token")
    ) as c:
        c.list_jobs()
    took["token"] = time.monotonic() - started

    started = time.monotonic()
    status, body = https_get(daemon.ports.metrics, "/metrics", tls_context(pki, "prometheus"))
    assert status == 200 and body.startswith(b"# HELP")
    took["metrics"] = time.monotonic() - started

    started = time.monotonic()
    conn = http.client.HTTPSConnection(
        "127.0.0.1", daemon.extender_port, timeout=5, context=tls_context(pki, "scheduler")
    )
    conn.request(
        "POST", "/prioritize", json.dumps({"Pod": {}, "NodeNames": ["gpu-a001"]}), {"Content-Type": "application/json"}
    )
    reply = conn.getresponse()
    assert reply.status == 200, reply.read()
    conn.close()
    took["extender"] = time.monotonic() - started

    started = time.monotonic()
    with (
        socket.create_connection(("127.0.0.1", daemon.ports.openflow), timeout=5) as raw,
        tls_context(pki, "switch").wrap_socket(raw) as switch,
    ):
        switch.sendall(OFPT_HELLO)
        version, kind = struct.unpack("!BB", switch.recv(8)[:2])
        assert (version, kind) == (4, 0), "the controller's first message is its HELLO"
    took["openflow"] = time.monotonic() - started
    return took


def test_connections_held_open_in_silence_on_every_listener_hold_up_no_legitimate_client(daemon, pki):
    ports = {
        "grpc": daemon.ports.grpc,
        "token": daemon.token_port,
        "metrics": daemon.ports.metrics,
        "extender": daemon.extender_port,
        "openflow": daemon.ports.openflow,
    }
    idle = [
        socket.create_connection(("127.0.0.1", port), timeout=5)
        for port in ports.values()
        for _ in range(IDLE_PER_LISTENER)
    ]
    try:
        time.sleep(0.5)  # the listeners have seen them
        took = served(daemon, pki)
        for sock in idle:  # still held: nothing was answered by closing them
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        for sock in idle:
            sock.close()
    print("served with idle connections open: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in took.items()))
    assert all(seconds <= 1.0 for seconds in took.values()), took


def test_liveness_needs_no_certificate_and_metrics_do(daemon, pki):
    status, body = https_get(daemon.ports.metrics, "/healthz", tls_context(pki, None))
    assert (status, body) == (200, b"ok\n")
    status, _ = https_get(daemon.ports.metrics, "/metrics", tls_context(pki, None))
    assert status == 403


def test_ten_thousand_calls_without_a_token_cost_the_log_and_audit_under_100_kb(daemon, pki):
    log, audit = daemon.log_path, daemon.store.parent / "audit.jsonl"
    before = (log.stat().st_size, audit.stat().st_size, total(metrics(daemon, pki), "railyard_api_denied_total"))
    channel = grpc.secure_channel(
        f"127.0.0.1:{daemon.token_port}", grpc.ssl_channel_credentials((pki / "ca.crt").read_bytes())
    )
    stub = ppb_grpc.PlacementServiceStub(channel)
    refused = 0
    for _ in range(10_000):
        try:
            stub.ListJobs(ppb.ListJobsRequest(), timeout=5)
        except grpc.RpcError as exc:
            refused += exc.code() is grpc.StatusCode.UNAUTHENTICATED
    channel.close()
    time.sleep(0.2)
    grown = log.stat().st_size - before[0], audit.stat().st_size - before[1]
    counted = total(metrics(daemon, pki), "railyard_api_denied_total") - before[2]
    print(f"10,000 refused calls: log +{grown[0]} B, audit +{grown[1]} B, counted {counted:g}")
    assert refused == 10_000 and counted == 10_000  # every one refused, and counted
    assert sum(grown) <= 100_000
    lines = [json.loads(line) for line in audit.read_text().splitlines() if '"UNAUTHENTICATED"' in line]
    assert lines and all(line["peer"] == "127.0.0.1" for line in lines)


def test_a_handshake_without_a_certificate_is_one_line_in_the_log(daemon, pki):
    before = total(metrics(daemon, pki), "railyard_listener_refused_total", listener="extender", reason="handshake")
    with (
        socket.create_connection(("127.0.0.1", daemon.extender_port), timeout=5) as raw,
        pytest.raises((ssl.SSLError, ConnectionError)),
        tls_context(pki, None).wrap_socket(raw) as conn,
    ):
        conn.sendall(b"POST /filter HTTP/1.1\r\n\r\n")
        conn.recv(1)
    time.sleep(0.2)
    text = daemon.log_path.read_text()
    assert "extender listener: TLS handshake failed" in text and "Traceback" not in text
    assert (
        total(metrics(daemon, pki), "railyard_listener_refused_total", listener="extender", reason="handshake")
        == before + 1
    )


def test_the_bearer_scheme_is_case_insensitive(daemon, pki):
    token = (pki / "extender.token").read_text().strip()
    channel = grpc.secure_channel(
        f"127.0.0.1:{daemon.token_port}", grpc.ssl_channel_credentials((pki / "ca.crt").read_bytes())
    )
    stub = ppb_grpc.PlacementServiceStub(channel)
    for scheme in ("bearer", "BEARER", "Bearer"):
        stub.ListJobs(ppb.ListJobsRequest(), metadata=(("authorization", f"{scheme} {token}"),), timeout=5)
    channel.close()


def test_an_undecodable_mutation_and_each_telemetry_stream_are_audited(daemon, pki):
    audit = daemon.store.parent / "audit.jsonl"
    channel = grpc.secure_channel(f"127.0.0.1:{daemon.ports.grpc}", client_tls(pki, "operator").credentials())
    drain: grpc.UnaryUnaryMultiCallable = channel.unary_unary("/railyard.v1.FabricService/DrainSwitch", None, None)
    with pytest.raises(grpc.RpcError) as err:
        drain(b"\xff\xff\xff", timeout=5)
    channel.close()
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    with daemon.client(client_tls(pki, "agent")) as agent:
        batch = tpb.TelemetryBatch(hops=[tpb.HopRecord(switch="ryl0r0", egress_port=3, tx_bps=1e9)] * 3)
        assert agent.report_telemetry([batch, batch]).accepted_records == 6
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert {"identity": "operator", "method": "DrainSwitch", "code": "INVALID_ARGUMENT"}.items() <= lines[-2].items()
    assert {"identity": "agent", "method": "ReportTelemetry", "code": "OK", "records": 6}.items() <= lines[-1].items()
