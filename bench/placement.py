"""Placement benchmark on the 16,384-GPU spec (large.yaml, FT2-shaped: 64 pods
x 32 servers x 8 rails, 8 planes of 32 spines, 400G everywhere; the same
geometry as ft2-16k.yaml).

A seeded stream of scheduler requests (8 to 1024 GPUs; ring, tree and
all-to-all; 50 Gb/s per flow) runs until the fabric is full, after which a
random job is released whenever one does not fit, so most requests see a
busy, fragmented fabric. Measured:

- core:          `place()` latency, the pure placement the API calls, with the
                 state the intent service keeps between requests (the GPU
                 ledger and the load ledger);
- baseline:      naive first-fit + ECMP-hash placement from the same state,
                 timed the same way; its predicted peak is the quality baseline;
- api:           the same stream as PlaceJob/ReleaseJob calls over gRPC to the
                 real daemon (SQLite store included), on loopback;
- fragmentation: bench/fragmentation.py on default.yaml and ft2-16k.yaml: how
                 full the fabric is at the first refusal of a job that fits
                 by GPU count, against the rule before best fit.

    make bench-placement  ->  bench/results/placement.json
    (targets: PlaceJob p99 <= 50 ms for 8-1024 GPU jobs; >= 98% allocated at
    the first refusal that fits by count)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path

import grpc

from bench import fragmentation, write_result
from controller.fabric import NicId, load_fabric
from controller.fabric.spec import SPECS_DIR
from controller.te.capacity import Usage
from controller.te.demand import planned_flows
from controller.te.jobs import Drains, Job, JobRequest, Pattern
from controller.te.load import LoadLedger, max_utilization
from controller.te.paths import assign_hashed
from controller.te.placement import FabricState, NoCapacity, available_servers, place
from emulation.model.stats import percentile
from emulation.processes.controller_process import ControllerProcess, Ports, total

SPEC = SPECS_DIR / "large.yaml"
SIZES = (8, 16, 64, 128, 256, 512, 1024)


def requests(count: int, seed: int) -> list[JobRequest]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        size = rng.choice(SIZES)
        # All-to-all grows with servers squared; schedulers run it on expert-parallel groups, not whole pods.
        pattern = rng.choice(list(Pattern)) if size <= 64 else rng.choice([Pattern.RING, Pattern.TREE])
        out.append(JobRequest(f"job-{i:04d}", size, pattern, 50.0))
    return out


def tier_peak(fabric, load, egresses) -> float:
    capacity = fabric.capacity_bps
    return max(load.get(e, 0.0) / capacity[e] for e in egresses)


def naive(fabric, state: FabricState, request: JobRequest, tier) -> tuple[float, float] | None:
    """First-fit servers in fabric order, ECMP-hashed spines; returns its predicted
    (fabric-wide peak, spine-tier peak)."""
    k = request.per_server(fabric.rails)
    servers = [key for _, keys in sorted(available_servers(fabric, state, request).items()) for key in keys]
    servers = servers[: request.gpu_count // k]
    if len(servers) < request.gpu_count // k:
        return None
    base = state.base_load(fabric)
    flows = planned_flows(request, servers, k, fabric.spec.rates.nic_gbps * 1e9, None, fabric.spec.pods_per_cluster)
    _, layer = assign_hashed(fabric, Drains(), base, flows)
    return max(max_utilization(fabric, base), layer.touched_peak()), tier_peak(fabric, layer, tier)


def percentiles(samples: list[float]) -> dict:
    return {
        "n": len(samples),
        "p50_ms": percentile(samples, 0.50) * 1e3,
        "p90_ms": percentile(samples, 0.90) * 1e3,
        "p99_ms": percentile(samples, 0.99) * 1e3,
        "max_ms": max(samples) * 1e3,
        "mean_ms": statistics.fmean(samples) * 1e3,
    }


def run_core(fabric, stream: list[JobRequest], seed: int) -> dict:
    rng = random.Random(seed + 1)
    jobs: dict[str, Job] = {}
    usage, ledger = Usage(), LoadLedger(fabric)  # as the intent service keeps them
    load = ledger.bps
    ours, baseline, quality, spine_quality = [], [], [], []
    placed_s, refused_s = [], []
    tier = fabric.spine_tier
    releases = refusals = 0
    for request in stream:
        state = FabricState(jobs, usage=usage, jobs_bps=ledger.bps, ledger=ledger)
        started = time.perf_counter()
        naive_peaks = naive(fabric, state, request, tier)
        baseline.append(time.perf_counter() - started)
        started = time.perf_counter()
        try:
            job = place(fabric, state, request, now=0.0)
        except NoCapacity:
            ours.append(time.perf_counter() - started)
            refused_s.append(ours[-1])
            refusals += 1
            if jobs:
                victim = jobs.pop(rng.choice(sorted(jobs)))
                usage.remove(victim)
                ledger.add(victim, sign=-1.0)
                releases += 1
            continue
        ours.append(time.perf_counter() - started)
        placed_s.append(ours[-1])
        jobs[job.job_id] = job
        usage.add(job)
        ledger.add(job)
        if naive_peaks:
            quality.append(job.predicted_max_utilization / naive_peaks[0])
            spine_quality.append((tier_peak(fabric, load, tier), naive_peaks[1]))
    return {
        "place": percentiles(ours),
        "place_when_placed": percentiles(placed_s),
        "place_when_refused": percentiles(refused_s),
        "naive_first_fit": percentiles(baseline),
        "p99_vs_naive_ratio": percentiles(ours)["p99_ms"] / percentiles(baseline)["p99_ms"],
        "predicted_peak_vs_naive": {
            "mean": statistics.fmean(quality),
            "max": max(quality),
            "min": min(quality),
            "n": len(quality),
        },
        # Fabric-wide peaks are set by NIC links (a NIC's own flows), the same for
        # any placement; the spine tier is where placement choices show.
        "spine_tier_peak": {
            "ours_mean": statistics.fmean(o for o, _ in spine_quality),
            "naive_mean": statistics.fmean(n for _, n in spine_quality),
            "ours_max": max(o for o, _ in spine_quality),
            "naive_max": max(n for _, n in spine_quality),
            "requests_where_ours_lower": sum(1 for o, n in spine_quality if o < n - 1e-9),
            "requests_where_ours_higher": sum(1 for o, n in spine_quality if o > n + 1e-9),
        },
        "refused": refusals,
        "released": releases,
        "jobs_at_end": len(jobs),
        "gpus_at_end": sum(len(j.gpus) for j in jobs.values()),
    }


def run_api(spec: Path, stream: list[JobRequest], seed: int, workdir: Path, store: str | None = None) -> dict:
    """The stream as PlaceJob/ReleaseJob calls to the real daemon, on its
    SQLite store or on `store` (an etcd:// URL: a replica that must lead first)."""
    rng = random.Random(seed + 1)
    ctl = ControllerProcess(
        spec,
        workdir / "intent.db",
        Ports.pick(),
        workdir / "controller.log",
        3600,
        # The rate limit is lifted: this measures placement, not the per-caller budget.
        extra_args=("--mutations-per-second", "100000", *(("--store", store) if store else ())),
    ).start()
    latencies, placed = [], []
    by_size: dict[int, list[float]] = {}
    placed_s, refused_s = [], []
    try:
        ctl.wait_serving_api(60.0)
        deadline = time.monotonic() + 30
        while store and total(ctl.metrics(), "railyard_leader") != 1:  # elected: it takes mutations
            assert time.monotonic() < deadline, "the replica was not elected"
            time.sleep(0.1)
        with ctl.client() as client:
            for request in stream:
                started = time.perf_counter()
                try:
                    client.place_job(request.job_id, request.gpu_count, request.pattern.value, request.flow_gbps)
                    latencies.append(time.perf_counter() - started)
                    placed_s.append(latencies[-1])
                    placed.append(request.job_id)
                except grpc.RpcError as exc:
                    latencies.append(time.perf_counter() - started)
                    refused_s.append(latencies[-1])
                    if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                        raise
                    if placed:
                        client.release_job(placed.pop(rng.randrange(len(placed))))
                by_size.setdefault(request.gpu_count, []).append(latencies[-1])
    finally:
        ctl.stop()
    return {
        "place_job_rpc": percentiles(latencies),
        "place_job_rpc_when_placed": percentiles(placed_s),
        "place_job_rpc_when_refused": percentiles(refused_s),
        "place_job_rpc_by_gpus": {str(size): percentiles(samples) for size, samples in sorted(by_size.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default=str(SPEC), help="fabric spec (default: large.yaml, 16,384 GPUs)")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip-api", action="store_true")
    parser.add_argument("--skip-fragmentation", action="store_true")
    parser.add_argument(
        "--fragmentation-seeds", type=int, default=0, help="per spec (default: 200 on default.yaml, 3 at 16K)"
    )
    parser.add_argument("--out", default="bench/results/placement.json")
    args = parser.parse_args()

    spec = Path(args.spec)
    fabric = load_fabric(spec)
    started = time.perf_counter()
    fabric.warm()
    gc.freeze()  # as the daemon does: the fabric's caches are permanent, keep them out of GC passes
    warm_s = time.perf_counter() - started
    if spec == SPEC:
        assert fabric.gpu_count == 16384 and NicId(7, 63, 31) in fabric.nics
    stream = requests(args.requests, args.seed)
    result = {
        "benchmark": "placement",
        "host": platform.node(),
        "load_average_at_start": os.getloadavg(),
        "spec": spec.name,
        "gpus": fabric.gpu_count,
        "requests": args.requests,
        "seed": args.seed,
        "warm_seconds": warm_s,
        "core": run_core(fabric, stream, args.seed),
    }
    print(json.dumps(result["core"], indent=2), flush=True)
    if not args.skip_api:
        with tempfile.TemporaryDirectory(prefix="railyard-bench-") as tmp:
            result["api"] = run_api(spec, stream, args.seed, Path(tmp))
        print(json.dumps(result["api"], indent=2), flush=True)
    if not args.skip_fragmentation:
        runs = fragmentation.run_all(list(fragmentation.SPECS), args.fragmentation_seeds)
        result["fragmentation"] = {"headline": fragmentation.headline(runs), "specs": runs}
        for row in result["fragmentation"]["headline"]:
            print(json.dumps(row))
    result["load_average_at_end"] = os.getloadavg()
    out = write_result(args.out, result)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
