"""The kube-scheduler extender on the real daemon: recorded, upstream-shaped
ExtenderArgs in (tests/data/extender/), ExtenderFilterResult and
HostPriorityList out with the upstream field names, in the clear on
loopback and over mutual TLS with the role policy."""

import copy
import http.client
import json
import ssl
from pathlib import Path
from typing import Any

import pytest

from controller.security import certs
from emulation.processes.controller_process import free_port
from tests.integration.helpers import api_daemon, client_tls, mutual_tls_args

DATA = Path(__file__).parent.parent / "data"
HOSTS = DATA / "exports" / "demo-hosts.yaml"
FILTER_RESULT_KEYS = {"NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def recorded(name: str) -> dict:
    return json.loads((DATA / "extender" / name).read_text())


def post(port: int, verb: str, body, context: ssl.SSLContext | None = None) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    if context is None:
        conn: http.client.HTTPConnection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    conn.request("POST", f"/{verb}", data, {"Content-Type": "application/json"})
    reply = conn.getresponse()
    status, payload = reply.status, json.loads(reply.read())
    conn.close()
    return status, payload


@pytest.fixture(scope="module")
def extender(tmp_path_factory):
    port = free_port()
    args = ("--hosts", str(HOSTS), "--extender-listen", f"127.0.0.1:{port}")
    with api_daemon(tmp_path_factory.mktemp("extender"), *args) as ctl:
        with ctl.client() as client:  # one GPU of gpu-b001 (rail 0) is taken
            client.place_job("blocker", 1, "ring", servers=["gpu-b001"], gpus_per_server=1)
        yield ctl, port


def test_filter_keeps_the_nodes_with_the_rails_the_pod_needs(extender):
    _, port = extender
    status, result = post(port, "filter", recorded("filter-args.json"))
    assert status == 200 and isinstance(result, dict) and set(result) == FILTER_RESULT_KEYS
    assert result["NodeNames"] == ["gpu-a001", "gpu-a002", "gpu-b002"]
    assert result["FailedNodes"] == {"gpu-b001": "needs rails 0-1 free and reachable; free: [1]"}
    assert result["FailedAndUnresolvableNodes"] == {"cpu-login-1": "not a server of the Railyard fabric"}
    assert result["Error"] == ""
    # nodeCacheCapable: false. kube-scheduler then reads the passing Node objects from Nodes.
    status, from_list = post(port, "filter", recorded("filter-args-nodelist.json"))
    assert status == 200 and from_list["NodeNames"] is None
    assert [n["metadata"]["name"] for n in from_list["Nodes"]["items"]] == ["gpu-a001", "gpu-b002"]
    assert from_list["Nodes"]["items"][0] == recorded("filter-args-nodelist.json")["Nodes"]["items"][0]


def test_prioritize_prefers_the_pod_that_holds_the_whole_job(extender):
    _, port = extender
    status, priorities = post(port, "prioritize", recorded("prioritize-args.json"))
    assert status == 200 and isinstance(priorities, list)
    assert all(
        set(p) == {"Host", "Score"} and isinstance(p["Score"], int) and 0 <= p["Score"] <= 10 for p in priorities
    )
    score = {p["Host"]: p["Score"] for p in priorities}
    # Pod 0 holds both of the job's nodes (rails 0-1 free on each); pod 1 only one.
    assert score["gpu-a001"] == score["gpu-a002"] > score["gpu-b001"] == score["gpu-b002"] > 0


def test_a_placed_job_keeps_its_own_nodes_and_other_pods_pass_through(extender):
    ctl, port = extender
    with ctl.client() as client:
        client.place_job("train-9", 4, "ring", servers=["gpu-a002", "gpu-b002"])
    args = recorded("filter-args.json")
    args["Pod"]["metadata"]["labels"]["railyard.io/job"] = "train-9"
    _, result = post(port, "filter", args)
    assert result["NodeNames"] == ["gpu-a002", "gpu-b002"]
    _, priorities = post(port, "prioritize", args)
    assert {p["Host"]: p["Score"] for p in priorities} == {
        "gpu-a001": 0, "gpu-a002": 10, "gpu-b001": 0, "gpu-b002": 10, "cpu-login-1": 0,
    }  # fmt: skip
    plain = copy.deepcopy(args)
    del plain["Pod"]["metadata"]["labels"]["railyard.io/job"]
    _, untouched = post(port, "filter", plain)
    assert untouched["NodeNames"] == args["NodeNames"] and untouched["FailedNodes"] == {}
    with ctl.client() as client:
        client.release_job("train-9")


def test_bad_requests_get_a_clear_error_and_change_nothing(extender):
    ctl, port = extender
    with ctl.client() as client:
        before = client.list_jobs_at()
    status, result = post(port, "filter", b"{not json")
    assert status == 200 and result["NodeNames"] == [] and "Expecting property name" in result["Error"]
    args = recorded("filter-args.json")
    args["Pod"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "two"
    _, result = post(port, "filter", args)
    assert "nvidia.com/gpu of container trainer: 'two' is not a whole number" in result["Error"]
    status, result = post(port, "prioritize", {"Pod": {}, "NodeNames": "gpu-a001"})
    assert status == 400 and "must list node names" in result["Error"]
    _, result = post(port, "filter", {"Pod": {"metadata": {"labels": []}}, "NodeNames": ["gpu-a001"]})
    assert result["Error"] == "Pod.metadata.labels: expected an object"
    status, _ = post(port, "bind", recorded("filter-args.json"))
    assert status == 404
    with ctl.client() as client:
        assert client.list_jobs_at() == before


def test_over_mutual_tls_a_scheduler_is_answered_and_an_agent_is_refused(tmp_path):
    pki = tmp_path / "pki"
    certs.init_dir(pki)
    (tmp_path / "policy.yaml").write_text("identities:\n  scheduler: scheduler\n  agent: agent\n  operator: operator\n")
    port = free_port()
    args = (*mutual_tls_args(pki, tmp_path / "policy.yaml"), "--extender-listen", f"127.0.0.1:{port}")
    with api_daemon(tmp_path, *args, tls=client_tls(pki, "operator")):

        def context(who: str | None) -> ssl.SSLContext:
            ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
            if who:
                ctx.load_cert_chain(pki / f"{who}.crt", pki / f"{who}.key")
            return ctx

        status, result = post(port, "filter", recorded("filter-args-nodelist.json"), context("scheduler"))
        assert status == 200 and result["Nodes"]["items"] == []  # no host map: unknown names
        status, result = post(port, "filter", recorded("filter-args-nodelist.json"), context("agent"))
        assert status == 403 and "identity 'agent' may not ask the extender" in result["Error"]
        with pytest.raises((ssl.SSLError, ConnectionError)):
            post(port, "filter", recorded("filter-args-nodelist.json"), context(None))
