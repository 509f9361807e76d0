"""The API over mutual TLS, against the real daemon (no fabric needed): real
handshakes with certificates from `railyard certs init`, and the role policy.
A client from another CA, with an expired certificate, or with none, does not
get through the handshake; a known client gets only what its role allows."""

import datetime as dt
import json
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from controller.api.client import Client, ClientTls
from controller.api.gen.railyard.v1 import placement_pb2 as ppb
from controller.api.gen.railyard.v1 import placement_pb2_grpc as ppb_grpc
from controller.api.gen.railyard.v1 import telemetry_pb2 as tpb
from controller.intent.drains import DrainTarget
from controller.security import certs, tokens
from emulation.processes.controller_process import free_port, total
from emulation.processes.prometheus_local import LocalPrometheus
from tests.integration.helpers import api_daemon, client_tls, mutual_tls_args

POLICY = """identities:
  scheduler: scheduler
  extender: scheduler
  agent: {role: agent, switches: [ryl0r0, ryl0r1]}
  operator: operator
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    certs.init_dir(directory)
    ca = certs.new_ca()
    ours = certs.read(directory, "ca")
    certs.write(certs.issue(ca, "scheduler"), directory, "other-ca-scheduler")  # same name, another CA
    expired_at = dt.datetime.now(dt.UTC) - dt.timedelta(days=3)
    certs.write(certs.issue(ours, "scheduler", now=expired_at, days=1), directory, "expired-scheduler")
    certs.write(certs.issue(ours, "mallory"), directory, "mallory")  # our CA, but no role
    (directory / "policy.yaml").write_text(POLICY)
    tokens.add_token(directory, "extender")  # a scheduler without a certificate
    tokens.add_token(directory, "stranger")  # a known token, but no role
    return directory


@pytest.fixture(scope="module")
def token_port() -> int:
    """The daemon's second API listener: TLS without client certificates, bearer tokens."""
    return free_port()


@pytest.fixture(scope="module")
def daemon(pki, token_port, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secure")
    args = (
        *mutual_tls_args(pki, pki / "policy.yaml"),
        *("--audit-log", str(tmp / "audit.jsonl")),
        *("--tokens", str(pki / "tokens.yaml"), "--grpc-token-listen", f"127.0.0.1:{token_port}"),
    )
    with api_daemon(tmp, *args, tls=client_tls(pki, "operator")) as ctl:
        yield ctl


def test_a_real_tls_handshake_shows_the_controllers_certificate(daemon, pki):
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(pki / "scheduler.crt", pki / "scheduler.key")
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", daemon.ports.grpc), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as conn,
    ):
        peer = conn.getpeercert()
        assert peer is not None
        assert (("commonName", "railyard-controller"),) in peer["subject"]
        assert conn.version() in ("TLSv1.2", "TLSv1.3")


def test_a_scheduler_places_and_an_operator_drains(daemon, pki):
    with daemon.client(client_tls(pki, "scheduler")) as scheduler:
        _, listed_at = scheduler.list_jobs_at()
        placed = scheduler.place_job("secure-1", 2, "ring")
        assert placed.created
        stream = scheduler.watch_jobs(timeout_s=10, since_revision=listed_at)  # a server stream, through the roles
        assert next(iter(stream)).job.job_id == "secure-1"
        stream.cancel()
        # Where there is room and how busy the links are: a scheduler's reads too.
        assert scheduler.free_capacity().free_gpu_count == 6
        assert scheduler.list_links() and scheduler.get_fabric().name == "demo"
        scheduler.release_job("secure-1")
    with daemon.client() as operator:  # the operator's certificate
        operator.drain(DrainTarget.SWITCH, "rys0")
        operator.drain(DrainTarget.SWITCH, "rys0", drained=False)


@pytest.mark.parametrize("who", ["other-ca-scheduler", "expired-scheduler"])
def test_a_certificate_from_another_ca_or_expired_fails_the_handshake(daemon, pki, who):
    with daemon.client(client_tls(pki, who)) as client:
        client.timeout = 5
        with pytest.raises(grpc.RpcError) as err:
            client.list_jobs()
        assert err.value.code() is grpc.StatusCode.UNAVAILABLE, err.value.details()


def test_no_client_certificate_or_plaintext_fails_the_handshake(daemon, pki):
    channel = grpc.secure_channel(
        f"127.0.0.1:{daemon.ports.grpc}", grpc.ssl_channel_credentials((pki / "ca.crt").read_bytes())
    )
    plaintext = Client(f"127.0.0.1:{daemon.ports.grpc}", timeout_s=5)
    for call in (
        lambda: ppb_grpc.PlacementServiceStub(channel).ListJobs(ppb.ListJobsRequest(), timeout=5),
        plaintext.list_jobs,
    ):
        with pytest.raises(grpc.RpcError) as err:
            call()
        assert err.value.code() is grpc.StatusCode.UNAVAILABLE, err.value.details()
    channel.close()
    plaintext.close()


def test_roles_refuse_what_they_do_not_allow_and_change_nothing(daemon, pki):
    before = daemon.metrics()
    with daemon.client() as operator:
        fabric_before = operator.get_fabric()
        _, revision = operator.list_jobs_at()
    refusals = [
        ("scheduler", lambda c: c.drain(DrainTarget.SWITCH, "rys0"), "role scheduler may not call DrainSwitch"),
        ("agent", lambda c: c.place_job("agent-job", 2, "ring"), "role agent may not call PlaceJob"),
        ("operator", lambda c: c.place_job("op-job", 2, "ring"), "role operator may not call PlaceJob"),
        ("mallory", lambda c: c.list_jobs(), "identity 'mallory' has no role"),
    ]
    for who, call, words in refusals:
        with daemon.client(client_tls(pki, who)) as client, pytest.raises(grpc.RpcError) as err:
            call(client)
        assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED, (who, err.value.details())
        assert words in (err.value.details() or ""), err.value.details()
    with daemon.client() as operator:
        assert operator.get_fabric() == fabric_before  # nothing drained
        assert operator.list_jobs_at() == ([], revision)  # nothing placed
    after = daemon.metrics()
    denied = {
        method: total(after, "railyard_api_denied_total", method=method)
        - total(before, "railyard_api_denied_total", method=method)
        for method in ("DrainSwitch", "PlaceJob", "ListJobs")
    }
    assert denied == {"DrainSwitch": 1, "PlaceJob": 2, "ListJobs": 1}


def token_client(port: int, pki: Path, token: str | None = None, who: str = "extender") -> Client:
    """A client of the token listener: TLS, no certificate, `who`'s bearer token (or `token`)."""
    tls = ClientTls.with_token(pki / "ca.crt", pki / f"{who}.token")
    if token is not None:
        tls = ClientTls(tls.ca, token=token)
    return Client(f"127.0.0.1:{port}", timeout_s=5, tls=tls)


def test_a_bearer_token_on_the_token_listener_gets_its_identitys_role(daemon, pki, token_port):
    with token_client(token_port, pki) as extender:
        assert extender.place_job("by-token", 2, "ring").created
        with pytest.raises(grpc.RpcError) as err:
            extender.drain(DrainTarget.SWITCH, "rys0")
        assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert "role scheduler may not call DrainSwitch (identity 'extender')" in (err.value.details() or "")
        extender.release_job("by-token")
    with token_client(token_port, pki, who="stranger") as stranger, pytest.raises(grpc.RpcError) as err:
        stranger.list_jobs()
    assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert "identity 'stranger' has no role" in (err.value.details() or "")


def test_an_unknown_or_missing_token_is_unauthenticated_and_changes_nothing(daemon, pki, token_port):
    with daemon.client() as operator:
        _, revision = operator.list_jobs_at()
    with token_client(token_port, pki, token="A" * 43) as forger, pytest.raises(grpc.RpcError) as err:
        forger.place_job("forged", 2, "ring")
    assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "bearer token is not one the controller knows" in (err.value.details() or "")
    bare = grpc.secure_channel(f"127.0.0.1:{token_port}", grpc.ssl_channel_credentials((pki / "ca.crt").read_bytes()))
    with pytest.raises(grpc.RpcError) as err:
        ppb_grpc.PlacementServiceStub(bare).ListJobs(ppb.ListJobsRequest(), timeout=5)
    bare.close()
    assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
    # A token is no way past the certificate on the mutual-TLS listener.
    tls = ClientTls.with_token(pki / "ca.crt", pki / "extender.token")
    with (
        Client(f"127.0.0.1:{daemon.ports.grpc}", timeout_s=5, tls=tls) as cert_port,
        pytest.raises(grpc.RpcError) as err,
    ):
        cert_port.list_jobs()
    assert err.value.code() is grpc.StatusCode.UNAVAILABLE
    with daemon.client() as operator:
        assert operator.list_jobs_at() == ([], revision)


def test_the_cli_authenticates_with_a_token_file(daemon, pki, token_port):
    run = subprocess.run(
        [sys.executable, "-m", "controller.cli", "jobs", "--json", "--target", f"127.0.0.1:{token_port}",
         "--ca", str(pki / "ca.crt"), "--token", str(pki / "extender.token")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == []


def hop(switch: str) -> tpb.TelemetryBatch:
    return tpb.TelemetryBatch(hops=[tpb.HopRecord(switch=switch, egress_port=3, tx_bps=1e9)])


def test_an_agent_reports_only_for_the_switches_it_is_named_for(daemon, pki):
    with daemon.client(client_tls(pki, "agent")) as agent:
        assert agent.report_telemetry([hop("ryl0r0"), hop("ryl0r1")]).accepted_records == 2
        with pytest.raises(grpc.RpcError) as err:
            agent.report_telemetry([hop("ryl1r0")])
    assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert "may not report for switch 'ryl1r0'" in (err.value.details() or "")


def test_the_audit_log_has_a_line_for_each_mutation_and_refusal(daemon, pki):
    with daemon.client(client_tls(pki, "scheduler")) as scheduler:
        scheduler.place_job("audited", 2, "ring", request_id="req-9")
        with pytest.raises(grpc.RpcError):
            scheduler.drain(DrainTarget.SWITCH, "rys1")
    with daemon.client(client_tls(pki, "agent")) as agent, pytest.raises(grpc.RpcError):
        agent.report_telemetry([hop("rys1")])
    with daemon.client(client_tls(pki, "mallory")) as mallory, pytest.raises(grpc.RpcError):
        mallory.list_jobs()
    with daemon.client() as operator:
        operator.drain(DrainTarget.SWITCH, "rys0")
        operator.drain(DrainTarget.SWITCH, "rys0", drained=False)
    lines = [json.loads(line) for line in (daemon.store.parent / "audit.jsonl").read_text().splitlines()]
    seen = {(e["identity"], e["role"], e["method"], e["object"], e["request_id"], e["code"]) for e in lines}
    assert ("scheduler", "scheduler", "PlaceJob", "job audited", "req-9", "OK") in seen
    assert ("scheduler", "scheduler", "DrainSwitch", "", "", "PERMISSION_DENIED") in seen
    assert ("agent", "agent", "ReportTelemetry", "", "", "PERMISSION_DENIED") in seen
    assert ("mallory", "", "ListJobs", "", "", "PERMISSION_DENIED") in seen
    assert ("operator", "operator", "DrainSwitch", "switch rys0", "", "OK") in seen
    assert ("operator", "operator", "UndrainSwitch", "switch rys0", "", "OK") in seen
    assert all(e["time"].endswith("Z") for e in lines)
    with daemon.client(client_tls(pki, "scheduler")) as scheduler:
        scheduler.release_job("audited")


def test_a_real_prometheus_scrapes_the_metrics_over_https(daemon, pki, tmp_path):
    assert daemon.scrape().startswith("# HELP")  # HTTPS, the controller's certificate checked against the CA
    prometheus = LocalPrometheus([f"127.0.0.1:{daemon.ports.metrics}"], free_port(), workdir=tmp_path, pki=pki).start()
    try:
        deadline = time.monotonic() + 20
        while True:
            result = prometheus.query('up{job="railyard"}')["data"]["result"]
            if result and result[0]["value"][1] == "1":
                break
            assert time.monotonic() < deadline, f"not scraped over HTTPS: {result}"
            time.sleep(0.5)
    finally:
        prometheus.stop()


def test_a_listener_off_loopback_without_tls_is_refused_with_one_line(tmp_path):
    ports = [free_port() for _ in range(3)]
    run = subprocess.run(
        [sys.executable, "-m", "controller.cli", "controller", "run", "--store", str(tmp_path / "intent.db"),
         "--openflow-listen", f"127.0.0.1:{ports[0]}", "--grpc-listen", f"0.0.0.0:{ports[1]}",
         "--metrics-listen", f"127.0.0.1:{ports[2]}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2
    (line,) = run.stderr.strip().splitlines()
    assert "'grpc-listen'" in line and "not a loopback address" in line and "--insecure" in line
    assert not (tmp_path / "intent.db").exists()  # refused before anything was opened
