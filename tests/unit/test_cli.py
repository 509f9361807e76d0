"""The `railyard` command as a script sees it: --version, JSON, the
environment, the daemon's configuration file and check-config, and no
traceback where a user can reach one: closed pipes, paths that cannot be
written, files that are missing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from controller.cli.main import EXIT_BROKEN_PIPE, main
from controller.security import certs

ROOT = Path(__file__).resolve().parents[2]
NOT_A_DIR = "/etc/hostname/inside"  # a path under a regular file: unwritable even for root


def one_line(argv: list[str], capsys, status: int = 2) -> str:
    assert main(argv) == status, argv
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("railyard: ") and "Traceback" not in out + err, err
    return err


def test_version_names_the_installed_release(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("railyard ")


@pytest.mark.parametrize(
    "argv",
    [
        ["scenario", "list"],
        ["fabric", "show", "--spec", "rail-2k.yaml", "--addresses"],
        ["export", "volcano", "--spec", "rail-2k"],
        ["--help"],
    ],
)
def test_a_reader_that_closes_the_pipe_gets_no_traceback(argv):
    """`railyard scenario list | head -2`: the command stops quietly."""
    child = subprocess.Popen(
        [sys.executable, "-m", "controller.cli", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.read(1)
    child.stdout.close()  # the reader goes away
    err = child.stderr.read().decode()
    status = child.wait(timeout=60)
    assert err == "" and status in (0, EXIT_BROKEN_PIPE), (status, err)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["export", "kueue", "--out", f"{NOT_A_DIR}/x.yaml"], "--out: cannot write"),
        (["simulate", "--workload", "elephant", "--out", NOT_A_DIR], "--out: cannot write into"),
        (["scenario", "run", "elephant", "--out", NOT_A_DIR], "--out: cannot write into"),
        (["demo", "--out", NOT_A_DIR], "--out: cannot write into"),
        (["observe", "--data", NOT_A_DIR], "--data: cannot write into"),
        (["certs", "init", NOT_A_DIR], "cannot write"),
        (["certs", "token", "x", NOT_A_DIR], "cannot write"),
        (["controller", "run", "--no-te", "--store", f"{NOT_A_DIR}/intent.db"], "store"),
        (["export", "kueue", "--spec", "no-such-spec.yaml"], "no spec 'no-such-spec.yaml'"),
        (["export", "kueue", "--hosts", "/nonexistent-railyard/hosts.yaml"], "cannot read"),
        (["fabric", "show", "--spec", "/nonexistent-railyard/spec.yaml"], "cannot read"),
        (["simulate", "--workload", "no-such-scenario"], "no scenario"),
        (["controller", "check-config", "--spec", "no-such-spec"], "no spec"),
        (["controller", "check-config", "--config", "/nonexistent-railyard/railyard.yaml"], "cannot read"),
        (["jobs", "--ca", "/nonexistent-railyard/ca", "--token", "/nonexistent-railyard/t"], "--ca: cannot read"),
        (["pins", "--ca", "/nonexistent-railyard/ca", "--cert", "c", "--key", "k"], "cannot read"),
        (["certs", "fingerprint", "/etc/hostname"], "holds no PEM certificate"),
        (["export", "kueue", "--slurm-version", "24.11"], "only with slurm-block"),
        (["export", "slurm-block", "--slurm-version", "22.05"], "23.11 or later"),
    ],
)
def test_paths_that_cannot_be_written_or_read_are_one_line_and_exit_2(argv, words, capsys):
    assert words in one_line(argv, capsys)
    assert not Path(NOT_A_DIR).exists() and not Path("/nonexistent-railyard").exists()


def test_a_controller_that_cannot_be_reached_is_named_a_transport_failure(capsys, monkeypatch):
    monkeypatch.setenv("RAILYARD_TARGET", "127.0.0.1:1")  # the environment, as etcdctl reads its endpoints
    err = one_line(["health", "--json"], capsys, status=1)
    assert "cannot reach the controller at 127.0.0.1:1 (a transport failure" in err


def test_json_output_is_one_object_with_its_zeros(capsys):
    assert main(["fabric", "show", "--json", "--addresses"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["name"] == "demo" and shown["switches"] == {"leaf": 4, "spine": 2}
    assert shown["nics"][0] == {"nic": "ryh0s0-r0", "address": "10.0.0.1", "mac": "02:52:00:00:00:00",
                                "leaf": "ryl0r0", "port": 1}  # fmt: skip
    assert main(["scenario", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert any(s["name"] == "elephant" and s["description"] for s in listed)


def test_the_json_of_a_job_keeps_rank_pod_and_rail_0():
    from controller.api.gen.railyard.v1 import placement_pb2 as ppb
    from controller.cli.output import as_dict

    job = ppb.Job(job_id="j", gpus=[ppb.Gpu(rank=0, pod=0, rail=0, server="ryh0s0")])
    gpu = as_dict(job)["gpus"][0]
    assert gpu["rank"] == 0 and gpu["pod"] == 0 and gpu["rail"] == 0


# --- the daemon's configuration file -------------------------------------------


@pytest.fixture
def pki(tmp_path) -> Path:
    certs.init_dir(tmp_path / "pki")
    shutil.copy(ROOT / "deploy/policy.yaml", tmp_path / "pki/policy.yaml")
    return tmp_path / "pki"


def config(tmp_path, text: str) -> str:
    path = tmp_path / "railyard.yaml"
    path.write_text(text)
    return str(path)


def test_check_config_reads_the_file_and_flags_and_reports_every_listener(tmp_path, pki, capsys):
    path = config(
        tmp_path,
        f"grpc-listen: 127.0.0.1:50999\nno-te: true\nreconcile-interval: 5\nspec: three-tier\n"
        f"tls-cert: {pki}/server.crt\ntls-key: {pki}/server.key\ntls-ca: {pki}/ca.crt\npolicy: {pki}/policy.yaml\n",
    )
    assert main(["controller", "check-config", "--config", path, "--metrics-listen", "127.0.0.1:9999", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["fabric"] == "three-tier" and report["te"] is False and report["tls"]
    assert report["listeners"] == {
        "metrics": "https://127.0.0.1:9999/metrics",  # the flag wins over the file
        "openflow": "ssl:127.0.0.1:6653",
        "grpc": "grpcs://127.0.0.1:50999",  # from the file
    }
    assert report["identities"] == 6


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("grpc-listen: [1, 2]\n", "'grpc-listen': got [1, 2]; allowed: a string"),
        ("grpc_listen: 127.0.0.1:1\n", "'grpc_listen': unknown key"),
        ("no-te: yes please\n", "'no-te': got 'yes please'; allowed: true or false"),
        ("full-audit-every: 2.5\n", "'full-audit-every': got 2.5; allowed: an integer"),
        ("log-format: xml\n", "'log-format': got 'xml'; allowed: text, json"),
        ("- grpc-listen\n", "must be a mapping"),
        ("reconcile-interval: 0\n", "'reconcile-interval': 0.0 s"),  # checked as the flag is
    ],
)
def test_a_bad_configuration_file_names_its_key(tmp_path, text, words, capsys):
    assert words in one_line(["controller", "check-config", "--config", config(tmp_path, text)], capsys)


def test_check_config_refuses_a_policy_that_would_not_load(tmp_path, pki, capsys):
    (pki / "policy.yaml").write_text("identities: {scheduler: admin}\n")
    tls = ["--tls-cert", f"{pki}/server.crt", "--tls-key", f"{pki}/server.key", "--tls-ca", f"{pki}/ca.crt"]
    err = one_line(["controller", "check-config", *tls, "--policy", f"{pki}/policy.yaml"], capsys)
    assert "'identities.scheduler': 'admin' is not a role" in err


def test_controller_run_help_shows_every_listeners_default(capsys):
    with pytest.raises(SystemExit):
        main(["controller", "run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for default in ("127.0.0.1:6653", "127.0.0.1:50051", "127.0.0.1:8653"):
        assert f"(default {default})" in text
