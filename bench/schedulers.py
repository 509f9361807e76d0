"""Scheduler-facing calls on the 16,384-GPU spec (large.yaml), against the
real daemon with a busy fabric (the bench-placement request stream placed
until a share of the GPUs is held):

- extender: kube-scheduler's POST /filter and /prioritize for a pod of a
  64-GPU job, with 1,000 candidate node names (nodeCacheCapable), timed at
  the client (HTTP and JSON included). Target: p99 <= 50 ms.
- score: ScorePlacements over 16 candidate server sets for a 64-GPU
  all-to-all job, timed at the client; then each candidate placed for real
  (and released), its prediction read back: the ranking must agree.

    make bench-schedulers  ->  bench/results/schedulers.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import tempfile
import time
from pathlib import Path

import grpc

from bench import write_result
from bench.placement import SPEC, percentiles, requests
from controller.api.gen.railyard.v1 import placement_pb2 as ppb
from emulation.processes.controller_process import ControllerProcess, Ports, free_port

JOB_GPUS = 64
GPUS_PER_NODE = 8


def fill(client, share: float, seed: int, gpus: int) -> int:
    """Places the bench-placement stream until `share` of the GPUs are held; the GPUs held."""
    held = 0
    for request in requests(4000, seed):
        if held + request.gpu_count > share * gpus:
            continue
        try:
            client.place_job(request.job_id, request.gpu_count, request.pattern.value, request.flow_gbps)
            held += request.gpu_count
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
        if held >= share * gpus - 8:
            break
    return held


def extender_bench(port: int, servers: list[str], rounds: int, rng: random.Random) -> dict:
    pod = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": "probe-0",
            "labels": {"railyard.io/job": "probe", "railyard.io/job-gpus": str(JOB_GPUS)},
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(GPUS_PER_NODE)}}}]},
    }
    timings: dict[str, list[float]] = {"filter": [], "prioritize": []}
    passed = []
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for _ in range(rounds):
        body = json.dumps({"Pod": pod, "NodeNames": rng.sample(servers, 1000)}).encode()
        for verb in timings:
            started = time.perf_counter()
            conn.request("POST", f"/{verb}", body, {"Content-Type": "application/json"})
            reply = json.loads(conn.getresponse().read())
            timings[verb].append(time.perf_counter() - started)
            if verb == "filter":
                passed.append(len(reply["NodeNames"]))
    conn.close()
    return {
        "candidate_nodes": 1000,
        "filter": percentiles(timings["filter"]),
        "prioritize": percentiles(timings["prioritize"]),
        "nodes_passing_filter_mean": sum(passed) / len(passed),
    }


def score_bench(client, free: list[str], rounds: int, rng: random.Random) -> dict:
    job = ppb.PlaceJobRequest(job_id="scored", gpu_count=JOB_GPUS, pattern=ppb.COLLECTIVE_PATTERN_ALL_TO_ALL)
    job.flow_bandwidth_gbps = 50.0
    per_set = JOB_GPUS // GPUS_PER_NODE
    timings, last = [], None
    candidates: list[list[str]] = []
    for _ in range(rounds):
        candidates = [rng.sample(free, per_set) for _ in range(16)]
        started = time.perf_counter()
        last = client.score_placements(job, candidates)
        timings.append(time.perf_counter() - started)
    assert last is not None
    # Place each candidate for real, read its prediction back, release it.
    agree, read_back = True, []
    for score, servers in zip(last.scores, candidates):
        placed = client.place_job("scored", JOB_GPUS, "all-to-all", 50.0, servers=servers).job
        client.release_job("scored")
        read_back.append(placed.predicted_max_utilization_ratio)
        agree &= abs(placed.predicted_max_utilization_ratio - score.predicted_max_utilization_ratio) < 1e-9
    by_score = [s.candidate for s in sorted(last.scores, key=lambda s: s.rank)]
    spine = {s.candidate: s.spine_tier_peak_ratio for s in last.scores}
    by_read_back = sorted(range(16), key=lambda i: (-1.0 / (1.0 + read_back[i] + spine[i]), i))
    return {
        "candidates": 16,
        "servers_per_candidate": per_set,
        "score_placements": percentiles(timings),
        "predictions_equal_placed": agree,
        "ranking_agrees_with_placing": by_score == by_read_back,
        "predicted_max_utilization_range": [min(read_back), max(read_back)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default=str(SPEC))
    parser.add_argument("--fill", type=float, default=0.6, help="share of GPUs held before measuring (default 0.6)")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="bench/results/schedulers.json")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    result: dict = {
        "benchmark": "schedulers",
        "host": platform.node(),
        "load_average_at_start": os.getloadavg(),
        "spec": Path(args.spec).name,
    }
    with tempfile.TemporaryDirectory(prefix="railyard-bench-") as tmp:
        port = free_port()
        ctl = ControllerProcess(
            args.spec,
            Path(tmp, "intent.db"),
            Ports.pick(),
            Path(tmp, "controller.log"),
            3600,
            extra_args=("--mutations-per-second", "100000", "--extender-listen", f"127.0.0.1:{port}"),
        ).start()
        try:
            ctl.wait_serving_api(120.0)
            with ctl.client() as client:
                client.timeout = 60
                gpus = client.get_fabric().gpu_count
                result["gpus"] = gpus
                result["gpus_held"] = fill(client, args.fill, args.seed, gpus)
                capacity = client.free_capacity(include_full_servers=True)
                servers = [s.server for s in capacity.servers]
                free = [s.server for s in capacity.servers if s.free_gpu_count == s.gpu_count]
                result["extender"] = extender_bench(port, servers, args.rounds, rng)
                print(json.dumps(result["extender"]), flush=True)
                result["score"] = score_bench(client, free, args.rounds // 2, rng)
                print(json.dumps(result["score"]), flush=True)
        finally:
            ctl.stop()
    result["load_average_at_end"] = os.getloadavg()
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    main()
