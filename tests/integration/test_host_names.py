"""Scheduler node names through the real daemon (`--hosts`): a job placed by
node names comes back with them, in the API and in the CLI, and free
capacity lists them; an unknown name is refused with the field named, and a
bad host map stops the daemon before it opens anything."""

import json
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from controller.api.errors import FIELD_METADATA_KEY
from controller.api.gen.railyard.v1 import placement_pb2 as ppb
from emulation.processes.controller_process import free_port
from tests.integration.helpers import api_daemon

HOSTS = Path(__file__).parent.parent / "data" / "exports" / "demo-hosts.yaml"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    with api_daemon(tmp_path_factory.mktemp("hosts"), "--hosts", str(HOSTS)) as ctl:
        yield ctl


def cli(daemon, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli", *args, "--target", f"127.0.0.1:{daemon.ports.grpc}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_a_job_placed_by_node_names_comes_back_with_them(daemon):
    with daemon.client() as client:
        placed = client.place_job("by-nodes", 4, "ring", servers=["gpu-a002", "gpu-b001"])
        assert list(placed.job.request.servers) == ["gpu-a002", "gpu-b001"]
        assert {(g.node, g.server) for g in placed.job.gpus} == {("gpu-a002", "ryh0s1"), ("gpu-b001", "ryh1s0")}
        for job in (client.get_job("by-nodes"), *client.list_jobs()):
            assert {g.node for g in job.gpus} == {"gpu-a002", "gpu-b001"}
        free = client.free_capacity(include_full_servers=True)
        assert {s.node: s.server for s in free.servers} == {
            "gpu-a001": "ryh0s0", "gpu-a002": "ryh0s1", "gpu-b001": "ryh1s0", "gpu-b002": "ryh1s1",
        }  # fmt: skip
        # Railyard's own names still work, and come back as node names.
        mixed = client.place_job("mixed", 2, "ring", servers=["ryh0s0", "gpu-b002"], gpus_per_server=1)
        assert list(mixed.job.request.servers) == ["gpu-a001", "gpu-b002"]
        client.release_job("mixed")
        client.release_job("by-nodes")


def test_the_cli_places_and_shows_by_node_names(daemon):
    placed = cli(daemon, "place", "cli-nodes", "--gpus", "2", "--gpus-per-server", "1", "--servers",
                 "gpu-a001,gpu-b002", "--json")  # fmt: skip
    assert placed.returncode == 0, placed.stderr
    shown = cli(daemon, "jobs", "cli-nodes", "--json")
    assert shown.returncode == 0, shown.stderr
    job = json.loads(shown.stdout)  # one object, its zeros kept
    assert sorted((g["rank"], g["rail"]) for g in job["gpus"]) == [(0, 0), (1, 0)]
    assert sorted(g["node"] for g in job["gpus"]) == ["gpu-a001", "gpu-b002"]
    assert job["request"]["servers"] == ["gpu-a001", "gpu-b002"]
    free = cli(daemon, "free", "--servers", "--all")
    assert "gpu-b002" in free.stdout, free.stdout
    assert cli(daemon, "release", "cli-nodes").returncode == 0


def test_an_unknown_node_name_is_refused_with_its_field(daemon):
    with daemon.client() as client, pytest.raises(grpc.RpcError) as err:
        client.place_job("nowhere", 2, "ring", servers=["gpu-z999"])
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "gpu-z999" in (err.value.details() or "")
    assert isinstance(err.value, grpc.Call)
    assert dict(err.value.trailing_metadata() or ()).get(FIELD_METADATA_KEY, "").startswith("servers")
    # The same field as a standard google.rpc.BadRequest detail (AIP-193), as grpcio-status reads it.
    status = rpc_status.from_call(err.value)
    assert status is not None and status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    bad = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad)
    assert bad.field_violations[0].field.startswith("servers")
    assert "gpu-z999" in bad.field_violations[0].description
    with daemon.client() as client:
        assert "nowhere" not in {j.job_id for j in client.list_jobs()}


def test_a_bad_host_map_stops_the_daemon_with_one_line_before_it_opens_the_store(tmp_path):
    (tmp_path / "hosts.yaml").write_text("hosts:\n  ryh0s0: gpu-x\n  ryh0s1: gpu-x\n")
    ports = [free_port() for _ in range(3)]
    run = subprocess.run(
        [sys.executable, "-m", "controller.cli", "controller", "run", "--store", str(tmp_path / "intent.db"),
         "--hosts", str(tmp_path / "hosts.yaml"), "--openflow-listen", f"127.0.0.1:{ports[0]}",
         "--grpc-listen", f"127.0.0.1:{ports[1]}", "--metrics-listen", f"127.0.0.1:{ports[2]}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2
    (line,) = run.stderr.strip().splitlines()
    assert "hosts: 'hosts.ryh0s1': node name 'gpu-x' is also ryh0s0's" in line
    assert not (tmp_path / "intent.db").exists()


SLURM_SCRIPTS = Path(__file__).parent.parent.parent / "deploy" / "slurm"


def slurm_script(daemon, tmp_path, name: str, **env: str) -> subprocess.CompletedProcess:
    """deploy/slurm/`name` as slurmctld runs it: its job variables, and a
    slurm.conf for `scontrol show hostnames` (which needs no controller)."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=railyard\nSlurmctldHost=localhost\n")
    environment = {
        "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
        "SLURM_CONF": str(conf),
        "RAILYARD": f"{sys.executable} -m controller.cli",
        "RAILYARD_TARGET": f"127.0.0.1:{daemon.ports.grpc}",
        **env,
    }
    return subprocess.run([str(SLURM_SCRIPTS / name)], env=environment, capture_output=True, text=True, timeout=60)


def test_the_slurm_prolog_places_the_allocated_nodes_and_the_epilog_releases_them(daemon, tmp_path):
    job = {"SLURM_JOB_ID": "4242", "RAILYARD_GPUS_PER_NODE": "2"}
    prolog = slurm_script(daemon, tmp_path, "railyard-prolog.sh", SLURM_JOB_NODELIST="gpu-a[001-002]", **job)
    assert prolog.returncode == 0, prolog.stderr
    with daemon.client() as client:
        placed = client.get_job("slurm-4242")
        assert sorted({g.node for g in placed.gpus}) == ["gpu-a001", "gpu-a002"] and len(placed.gpus) == 4
    again = slurm_script(daemon, tmp_path, "railyard-prolog.sh", SLURM_JOB_NODELIST="gpu-a[001-002]", **job)
    assert again.returncode == 0, again.stderr  # a requeued job's prolog: the same placement (request id)
    for _ in range(2):  # the second finds nothing to release, and is fine with that
        epilog = slurm_script(daemon, tmp_path, "railyard-epilog.sh", **job)
        assert epilog.returncode == 0 and epilog.stderr == "", epilog.stderr
    with daemon.client() as client:
        assert "slurm-4242" not in {j.job_id for j in client.list_jobs()}
    refused = slurm_script(
        daemon, tmp_path, "railyard-prolog.sh", SLURM_JOB_NODELIST="gpu-z[001-002]", RAILYARD_REQUIRED="1", **job
    )
    assert refused.returncode == 1 and "could not place its paths on gpu-z001,gpu-z002" in refused.stderr


def test_the_slurm_prolog_asks_for_the_sites_queue_pairs_unless_the_jobs_comment_names_its_own(daemon, tmp_path):
    site = {"RAILYARD_GPUS_PER_NODE": "2", "RAILYARD_QPS_PER_CONNECTION": "2", "SLURM_JOB_NODELIST": "gpu-a[001-002]"}
    asked = {}
    for job_id, comment in (("4250", "urgent"), ("4251", "urgent,railyard-qps=4")):
        env = {**site, "SLURM_JOB_ID": job_id, "SLURM_JOB_COMMENT": comment}
        prolog = slurm_script(daemon, tmp_path, "railyard-prolog.sh", **env)
        assert prolog.returncode == 0, prolog.stderr
        with daemon.client() as client:
            asked[job_id] = client.get_job(f"slurm-{job_id}").request.qps_per_connection
        assert slurm_script(daemon, tmp_path, "railyard-epilog.sh", **env).returncode == 0
    assert asked == {"4250": 2, "4251": 4}
    env = {**site, "SLURM_JOB_ID": "4252", "SLURM_JOB_COMMENT": "railyard-qps=99", "RAILYARD_REQUIRED": "1"}
    refused = slurm_script(daemon, tmp_path, "railyard-prolog.sh", **env)
    assert refused.returncode == 1 and "qps_per_connection" in refused.stderr, refused.stderr
    with daemon.client() as client:
        assert "slurm-4252" not in {j.job_id for j in client.list_jobs()}


def test_score_placements_by_node_names_ranks_a_pod_over_a_spread_and_places_nothing(daemon):
    request = ppb.PlaceJobRequest(job_id="to-score", gpu_count=4, pattern=ppb.COLLECTIVE_PATTERN_RING)
    with daemon.client() as client:
        _, revision = client.list_jobs_at()
        scored = client.score_placements(request, [["gpu-a001", "gpu-b001"], ["gpu-a001", "gpu-a002"], ["gpu-zz"]])
        assert scored.intent_revision == revision
        spread, pod, unknown = scored.scores
        assert (pod.rank, spread.rank, unknown.rank) == (1, 2, 3)
        assert pod.feasible and spread.feasible and not unknown.feasible and "gpu-zz" in unknown.reason
        assert pod.spine_tier_peak_ratio == 0.0 < spread.spine_tier_peak_ratio and pod.score > spread.score
        # What PlaceJob predicts for the same servers (validate_only: nothing placed).
        dry = client.place_job("to-score", 4, "ring", servers=["gpu-a001", "gpu-b001"], validate_only=True)
        assert dry.validated_only and dry.job.predicted_max_utilization_ratio == spread.predicted_max_utilization_ratio
        assert client.list_jobs_at() == ([], revision)
    shown = cli(daemon, "score", "to-score", "--gpus", "4", "--candidate", "gpu-a001,gpu-b001",
                "--candidate", "gpu-a001,gpu-a002")  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    rows = [line.split() for line in shown.stdout.splitlines()[1:]]
    assert rows[0][:2] == ["1", "gpu-a001,gpu-a002"] and rows[1][:2] == ["2", "gpu-a001,gpu-b001"]
