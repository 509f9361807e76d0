"""The daemon run the way daemons are run, against the real process (no
fabric needed): SIGHUP reloads the policy, tokens and certificates without
dropping a connection and refuses a bad policy in one line; systemd hears
READY=1 once the API serves; the log is timestamped JSON on request and its
startup line names every listener with its scheme."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import ssl
import threading
import time
from pathlib import Path

import grpc
import pytest

from controller.api.gen.railyard.v1 import placement_pb2 as ppb
from controller.security import certs, tokens
from controller.security.policy import fingerprint
from emulation.processes.controller_process import ControllerProcess, Ports, free_port
from tests.integration.helpers import client_tls, mutual_tls_args

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pki(tmp_path) -> Path:
    directory = tmp_path / "pki"
    certs.init_dir(directory)
    tokens.add_token(directory, "extender")  # the docs' token example: a scheduler without a certificate
    shutil.copy(ROOT / "deploy" / "policy.yaml", directory / "policy.yaml")  # the shipped policy
    return directory


def daemon(tmp: Path, pki: Path, *extra: str, token_port: int | None = None) -> ControllerProcess:
    token = ("--tokens", str(pki / "tokens.yaml"), "--grpc-token-listen", f"127.0.0.1:{token_port}")
    args = (*mutual_tls_args(pki, pki / "policy.yaml"), *(token if token_port else ()), *extra)
    return ControllerProcess(
        None, tmp / "intent.db", Ports.pick(), tmp / "controller.log", te=False, extra_args=args,
        tls=client_tls(pki, "operator"),
    )  # fmt: skip


def wait_for_log(ctl: ControllerProcess, words: str, count: int = 1, timeout_s: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = [line for line in ctl.log_path.read_text().splitlines() if words in line]
        if len(lines) >= count:
            return lines
        time.sleep(0.05)
    raise TimeoutError(f"{words!r} not logged {count} times; log:\n{ctl.log_path.read_text()}")


def read_events(stream, events: list) -> None:
    try:
        events.extend(stream)
    except grpc.RpcError as exc:
        if exc.code() is not grpc.StatusCode.CANCELLED:  # cancelled: the test is done with it
            raise


def served_serial(port: int, pki: Path) -> int:
    """The serial number of the certificate a new TLS connection is offered."""
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(pki / "scheduler.crt", pki / "scheduler.key")
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as conn,
    ):
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    from cryptography import x509

    return x509.load_der_x509_certificate(der).serial_number


def test_sighup_revokes_a_certificate_keeps_a_stream_up_and_refuses_a_malformed_policy(tmp_path, pki):
    token_port = free_port()
    ctl = daemon(tmp_path, pki, token_port=token_port).start()
    events: list[ppb.JobEvent] = []
    try:
        ctl.wait_serving_api()
        with ctl.client() as operator, ctl.client(client_tls(pki, "scheduler")) as scheduler:
            _, revision = operator.list_jobs_at()
            stream = operator.watch_jobs(timeout_s=60, since_revision=revision)
            reader = threading.Thread(target=read_events, args=(stream, events), daemon=True)
            reader.start()
            scheduler.place_job("before-reload", 2, "ring")
            serial_before = served_serial(ctl.ports.grpc, pki)

            # Revoke the scheduler's certificate, and issue the server a new one.
            revoked = fingerprint((pki / "scheduler.crt").read_bytes())
            policy = (pki / "policy.yaml").read_text().replace("revoked: []", f"revoked:\n  - {revoked}")
            (pki / "policy.yaml").write_text(policy)
            ca = certs.read(pki, "ca")
            certs.write(certs.issue(ca, certs.SERVER_NAME, server_names=("localhost", "127.0.0.1")), pki, "server")
            assert ctl.proc is not None
            ctl.proc.send_signal(signal.SIGHUP)
            wait_for_log(ctl, "SIGHUP: reloaded")

            with pytest.raises(grpc.RpcError) as err:  # the connection it already had
                scheduler.list_jobs()
            assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED and "revoked" in (err.value.details() or "")
            with ctl.client(client_tls(pki, "scheduler")) as again, pytest.raises(grpc.RpcError) as err:
                again.list_jobs()  # a new connection
            assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
            assert served_serial(ctl.ports.grpc, pki) != serial_before  # the new certificate, on new connections

            # The extender's token (role scheduler in the shipped policy) places; the stream opened before sees it.
            token = tokens.read_token(pki / "extender.token")
            from controller.api.client import Client, ClientTls

            with Client(f"127.0.0.1:{token_port}", tls=ClientTls(ca=(pki / "ca.crt").read_bytes(), token=token)) as ext:
                ext.place_job("after-reload", 2, "ring")

            # A malformed policy: refused in one line, the one in force stays (the scheduler still revoked).
            (pki / "policy.yaml").write_text("identities: [scheduler\n")
            ctl.proc.send_signal(signal.SIGHUP)
            (refusal,) = wait_for_log(ctl, "reload refused")
            assert "policy" in refusal
            with ctl.client(client_tls(pki, "scheduler")) as again, pytest.raises(grpc.RpcError) as err:
                again.list_jobs()
            assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
            assert [j.job_id for j in operator.list_jobs()] == ["after-reload", "before-reload"]
            deadline = time.monotonic() + 10
            while len(events) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            stream.cancel()  # type: ignore[attr-defined]
    finally:
        ctl.stop()
    placed = [e.job.job_id for e in events if e.kind == ppb.JobEvent.KIND_PLACED]
    assert placed == ["before-reload", "after-reload"]  # one stream, across both reloads
    log = ctl.log_path.read_text()
    assert "Traceback" not in log
    assert len([line for line in log.splitlines() if "reload refused" in line]) == 1


def test_systemd_hears_ready_once_the_api_serves_then_reloading_and_stopping(tmp_path, pki, monkeypatch):
    notify = tmp_path / "notify.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify))
    listener.settimeout(30)
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify))
    ctl = daemon(tmp_path, pki).start()
    try:
        ready = listener.recv(4096).decode()
        assert ready.splitlines()[0] == "READY=1"
        with ctl.client() as operator:
            assert operator.health() == "SERVING"  # at READY, not some time after
        assert ctl.proc is not None
        ctl.proc.send_signal(signal.SIGHUP)
        reloading = listener.recv(4096).decode().splitlines()
        assert reloading[0] == "RELOADING=1" and reloading[1].startswith("MONOTONIC_USEC=")
        assert listener.recv(4096).decode().startswith("READY=1")
    finally:
        ctl.stop()
    assert listener.recv(4096).decode() == "STOPPING=1"
    listener.close()


def test_json_logs_and_a_startup_line_naming_every_listener_with_its_scheme(tmp_path, pki):
    token_port, extender_port = free_port(), free_port()
    ctl = daemon(
        tmp_path, pki, "--log-format", "json", "--extender-listen", f"127.0.0.1:{extender_port}", token_port=token_port
    ).start()
    try:
        ctl.wait_serving_api()
        wait_for_log(ctl, "listening:")
    finally:
        ctl.stop()
    records = [json.loads(line) for line in ctl.log_path.read_text().splitlines() if line.startswith("{")]
    assert records and all(r.keys() >= {"time", "level", "logger", "message"} for r in records)
    assert all(r["time"].endswith("Z") and r["time"][10] == "T" for r in records)
    (startup,) = [r["message"] for r in records if "listening:" in r["message"]]
    ports = ctl.ports
    for listener in (
        f"metrics https://127.0.0.1:{ports.metrics}/metrics",
        f"openflow ssl:127.0.0.1:{ports.openflow}",
        f"grpc grpcs://127.0.0.1:{ports.grpc}",
        f"grpc-token grpcs://127.0.0.1:{token_port}",
        f"extender https://127.0.0.1:{extender_port}",
    ):
        assert listener in startup, startup
    # Whatever the daemon logged, grpc's own C-core lines aside, is JSON.
    others = [line for line in ctl.log_path.read_text().splitlines() if line and not line.startswith("{")]
    assert all(line[:1] in "IWE" and line[1:5].isdigit() for line in others), others
