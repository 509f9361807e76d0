"""The extender's pure side: which job a pod belongs to, the candidate node
names in both request forms, and filter/prioritize over a fabric view."""

import re

import pytest

from controller.fabric import load_fabric
from controller.schedulers.extender import (
    ExtenderError,
    FabricView,
    PodJob,
    candidate_nodes,
    check_depth,
    filter_nodes,
    pod_job,
    prioritize,
)
from controller.schedulers.hosts import HostMap

DEMO = load_fabric()
HOSTS = HostMap.identity(DEMO)


def pod(labels: dict, gpus: object = "2") -> dict:
    return {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
    }


def view(free: dict[str, int], uplinks: dict[int, float] | None = None, job: frozenset[str] | None = None):
    pods = {s.name: s.pod for s in DEMO.servers}
    return FabricView({s: free.get(s, 0b11) for s in pods}, pods, uplinks or {}, job)


def test_a_pod_names_its_job_and_gpus():
    assert pod_job(pod({"railyard.io/job": "j", "railyard.io/job-gpus": "8"}), 2, 8) == PodJob("j", 2, 8)
    assert pod_job(pod({"railyard.io/job": "j"}), 2, 8) == PodJob("j", 2, 2)
    assert pod_job(pod({"app": "web"}), 2, 8) is None
    assert PodJob("j", 2, 8).nodes_needed == 4 and PodJob("j", 2, 8).rails == 0b11


@pytest.mark.parametrize(
    ("labels", "gpus", "words"),
    [
        ({"railyard.io/job": "j"}, "0", "asks for no nvidia.com/gpu"),
        ({"railyard.io/job": "j"}, "x", "'x' is not a whole number"),
        ({"railyard.io/job": "j", "railyard.io/job-gpus": "1"}, "2", "fewer than this pod's 2 GPUs"),
        ({"railyard.io/job": "j", "railyard.io/job-gpus": "-3"}, "2", "-3 is out of range"),
        # One node has a GPU per rail at most: a million used to cost 32 ms a node to refuse.
        (
            {"railyard.io/job": "j"},
            "1000000",
            "asks for 1000000 nvidia.com/gpu on one node; a server of this fabric has 2 rails",
        ),
        ({"railyard.io/job": "j", "railyard.io/job-gpus": "9"}, "2", "job-gpus is 9; the fabric has 8 GPUs"),
        ({"railyard.io/job": "j"}, "9" * 40, "is out of range"),
    ],
)
def test_a_bad_pod_gets_a_clear_error(labels, gpus, words):
    with pytest.raises(ExtenderError, match=re.escape(words)):
        pod_job(pod(labels, gpus), DEMO.rails, DEMO.gpu_count)


def test_json_nested_deeper_than_400_is_refused_before_it_is_parsed():
    check_depth(b"[" * 400 + b"]" * 400)
    check_depth(b'{"a": "' + b"[" * 5000 + b'"}')  # brackets inside a string do not nest
    check_depth(b'["\\\\", ' + b"[" * 399 + b"]" * 399 + b"]")  # an escaped backslash ends no string
    with pytest.raises(ExtenderError, match="nests deeper than 400 levels"):
        check_depth(b"[" * 100_000)
    with pytest.raises(ExtenderError):
        check_depth(b'{"a": "\\"", "b": ' + b"{" * 401)  # an escaped quote does not end a string


def test_both_request_forms_give_the_node_names():
    assert candidate_nodes({"NodeNames": ["a", "b"]}) == (["a", "b"], None)
    node = {"metadata": {"name": "a"}}
    assert candidate_nodes({"Nodes": {"items": [node]}, "NodeNames": None}) == (["a"], {"a": node})
    bad_args: list[object] = [{}, {"NodeNames": "a"}, {"NodeNames": [1]}, [], {"Nodes": {"items": [1]}}]
    for bad in bad_args:
        with pytest.raises(ExtenderError, match=r"node names|expected an object|Node objects"):
            candidate_nodes(bad)


def test_filter_wants_the_rails_the_pod_uses_and_prioritize_the_pod_that_holds_the_job():
    job = PodJob("j", 2, 4)
    fabric_view = view({"ryh1s0": 0b10}, uplinks={0: 0.5, 1: 0.0})
    result = filter_nodes(fabric_view, HOSTS, job, ["ryh0s0", "ryh1s0", "nope"])
    assert result["NodeNames"] == ["ryh0s0"] and set(result["FailedNodes"]) == {"ryh1s0"}
    assert set(result["FailedAndUnresolvableNodes"]) == {"nope"}
    scores = {p["Host"]: p["Score"] for p in prioritize(fabric_view, HOSTS, job, ["ryh0s0", "ryh1s1", "nope"])}
    # pod 0: holds both nodes (6) and half its uplinks free (2); pod 1: one of two (3), all free (4)
    assert scores == {"ryh0s0": 8, "ryh1s1": 7, "nope": 0}
    placed = view({}, job=frozenset({"ryh1s1"}))
    assert filter_nodes(placed, HOSTS, job, ["ryh0s0", "ryh1s1"])["NodeNames"] == ["ryh1s1"]
    assert [p["Score"] for p in prioritize(placed, HOSTS, job, ["ryh0s0", "ryh1s1"])] == [0, 10]
