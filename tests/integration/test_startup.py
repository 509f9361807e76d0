"""`railyard controller run` on what it cannot use: a key that is not the
certificate's, a CA file with no certificate, a port another process
holds, a store whose values do not read. Each is one line naming the
option or record, exit 2, and no traceback."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from controller.intent.store import SqliteIntentStore
from controller.security import certs, tokens
from emulation.processes.controller_process import free_port


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    certs.init_dir(directory)
    (directory / "policy.yaml").write_text("identities:\n  operator: operator\n")
    tokens.add_token(directory, "operator")
    (directory / "garbage-ca.crt").write_text(
        "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"
    )
    return directory


def tls(pki: Path, key: str = "server.key", ca: str = "ca.crt") -> list[str]:
    return ["--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / key), "--tls-ca", str(pki / ca),
            "--policy", str(pki / "policy.yaml")]  # fmt: skip


def bad_store(tmp: Path, sql: str) -> Path:
    path = tmp / "bad.db"
    SqliteIntentStore(path).close()
    db = sqlite3.connect(path)
    db.execute(sql)
    db.commit()
    db.close()
    return path


CASES = {
    "key of another certificate": (
        lambda pki, tmp, taken: tls(pki, key="operator.key"),
        ["'tls-key'", "does not match the certificate of --tls-cert"],
    ),
    "CA file without a certificate": (
        lambda pki, tmp, taken: tls(pki, ca="garbage-ca.crt"),
        ["'tls-ca'", "holds no usable PEM certificate"],
    ),
    "gRPC port taken": (lambda pki, tmp, taken: ["--grpc-listen", taken], ["'grpc-listen'", "Address already in use"]),
    "token port taken": (
        lambda pki, tmp, taken: [*tls(pki), "--tokens", str(pki / "tokens.yaml"), "--grpc-token-listen", taken],
        ["'grpc-token-listen'", "Address already in use"],
    ),
    "metrics port taken": (
        lambda pki, tmp, taken: ["--metrics-listen", taken],
        ["'metrics-listen'", "Address already in use"],
    ),
    "OpenFlow port taken": (
        lambda pki, tmp, taken: ["--openflow-listen", taken],
        ["'openflow-listen'", "Address already in use"],
    ),
    "extender port taken": (
        lambda pki, tmp, taken: ["--extender-listen", taken],
        ["'extender-listen'", "Address already in use"],
    ),
    "revision not a number": (
        lambda pki, tmp, taken: ["--store", str(bad_store(tmp, "UPDATE meta SET value = 'x1' WHERE key = 'revision'"))],
        ["meta.revision: 'x1' is not an intent revision"],
    ),
    "job record not JSON": (
        lambda pki, tmp, taken: ["--store", str(bad_store(tmp, "INSERT INTO intent VALUES ('job', 'j', '{oops')"))],
        ["record job/j: '{oops' is not a Railyard record"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_what_the_daemon_cannot_use_is_one_line_and_exit_2(pki, tmp_path, case):
    args, words = CASES[case]
    with socket.create_server(("127.0.0.1", 0)) as holder:
        taken = f"127.0.0.1:{holder.getsockname()[1]}"
        listen = {
            "--store": str(tmp_path / "intent.db"),
            "--grpc-listen": f"127.0.0.1:{free_port()}",
            "--metrics-listen": f"127.0.0.1:{free_port()}",
            "--openflow-listen": f"127.0.0.1:{free_port()}",
        }
        extra = args(pki, tmp_path, taken)
        for flag in [flag for flag in listen if flag in extra]:
            del listen[flag]
        run = subprocess.run(
            [sys.executable, "-m", "controller.cli", "controller", "run",
             *(part for pair in listen.items() for part in pair), *extra],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2, run.stderr[-2000:]
    assert len(lines) == 1, lines
    assert lines[0].startswith("railyard: ") and all(word in lines[0] for word in words), lines[0]
