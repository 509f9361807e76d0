"""The third tier at 32K GPUs, on the flow-level simulator: `meta-32k.yaml`
(8 clusters of 4,032 GPUs, 7:1 between spines and cores).

- `elephant`, a full cross-cluster permutation (every flow crosses the
  core), and `job-mix-32k`, training-mix-32k's jobs sending without end
  (92% of the GPUs asked for): ECMP, ideal spraying and the optimum side by
  side; TE's fraction of the optimum per cycle, moves over the last 100
  steady cycles (+-30% telemetry noise), the engine's step p50/p99, build +
  warm, and the simulator's speed (bench/scale.py's run, the same figures);
- `training-mix-32k`, jobs of 64 to 8,064 GPUs asked for until 92% of the
  GPUs: how many of the jobs that fit a cluster each placement keeps inside
  one, the share of collective flows crossing the core, and iteration times
  (p99) of Railyard's placement and TE against network-blind first-fit with ECMP.

Targets (the issue's): TE >= 97% of the optimum within 3 cycles; 0 moves in
steady state; engine step p99 <= 300 ms; build + warm <= 10 s; >= 1
simulated second per wall second; >= 95% of cluster-sized jobs in one cluster.

    make bench-three-tier  ->  bench/results/three-tier.json
    (python -m bench.three_tier --skip-training)
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from typing import Any

from bench import write_result
from bench.scale import SETTLE_CYCLES, run_one, summary_line
from bench.simulated import simulated
from emulation.model.jsonable import plain
from emulation.simulate.arms import FIRST_FIT_ECMP, RAILYARD_TE
from emulation.simulate.run import STEADY_CYCLES
from emulation.simulate.traffic import RAILYARD
from emulation.workload import load_workload

FABRIC = "meta-32k"
GOODPUT = ("elephant", "job-mix-32k")  # judged per cycle against the optimum
TRAINING = "training-mix-32k"
TARGETS = {"te_fraction": 0.97, "te_cycles": 3, "step_p99_s": 0.300, "build_s": 10.0, "speed": 1.0, "inside": 0.95}


def targets(run: dict[str, Any]) -> dict[str, Any]:
    cycles = run["te_cycles_to_97_and_holds"]
    step, cpu = run["engine_step_s"]["p99"], run["engine_step_cpu_s"]["p99"]
    return {
        "te_97_within_3_cycles": {"cycles": cycles, "met": cycles is not None and cycles <= TARGETS["te_cycles"]},
        "zero_moves_steady": {"moves": run["moves_steady"], "met": run["moves_steady"] == 0},
        # Judged by wall time; its CPU time beside it tells the engine's cost
        # from a neighbour's load on a shared machine.
        "engine_step_p99_s": {
            "value": step,
            "cpu": cpu,
            "target": TARGETS["step_p99_s"],
            "met": step <= TARGETS["step_p99_s"],
        },
        "build_and_warm_s": {
            "value": run["fabric_build_and_warm_s"],
            "target": TARGETS["build_s"],
            "met": run["fabric_build_and_warm_s"] <= TARGETS["build_s"],
        },
        "sim_s_per_wall_s": {
            "value": run["sim_s_per_wall_s"],
            "target": TARGETS["speed"],
            "met": run["sim_s_per_wall_s"] >= TARGETS["speed"],
        },
    }


def training(seed: int, duration_s: float | None) -> dict[str, Any]:
    started = time.perf_counter()
    result, _ = simulated(FABRIC, load_workload(TRAINING), seed, duration_s)
    arms = result.arms or {}
    te, first_fit = arms[RAILYARD_TE], arms[FIRST_FIT_ECMP]
    clusters = result.placement[RAILYARD].clusters
    inside = clusters.jobs_fitting_a_cluster_kept_inside if clusters else None
    # Pooled, the p99 is the slowest job's own (an all-to-all bound by its
    # NICs in every arm): the jobs the placement slowed are named apart.
    slower = {}
    for job, row in first_fit.jobs.items():
        mine = te.jobs.get(job)
        if row.iterations and mine and mine.iterations and row.p99_s > mine.p99_s * 1.01:
            slower[job] = {FIRST_FIT_ECMP: row.p99_s, RAILYARD_TE: mine.p99_s}
    return {
        "seed": seed,
        "placement": plain(result.placement),
        "iteration_p99_s": {RAILYARD_TE: te.overall.p99_s, FIRST_FIT_ECMP: first_fit.overall.p99_s},
        "slowdown_p99": {RAILYARD_TE: te.overall.slowdown_p99, FIRST_FIT_ECMP: first_fit.overall.slowdown_p99},
        "jobs_slower_under_first_fit_p99_s": slower,
        "jobs_inside_one_cluster": {"value": inside, "target": TARGETS["inside"], "met": (inside or 0) >= 0.95},
        "wall_s": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cycles", type=int, default=SETTLE_CYCLES + STEADY_CYCLES)
    parser.add_argument("--training-duration", type=float, help="simulated seconds of the training mix")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--out", default="bench/results/three-tier.json")
    args = parser.parse_args()
    result: dict[str, Any] = {"benchmark": "three-tier", "host": platform.node()}
    for workload in GOODPUT:
        run = run_one(FABRIC, workload, args.seed, args.cycles)
        run["targets"] = targets(run)
        print(summary_line(run), flush=True)
        result[workload] = run
    if not args.skip_training:
        result["training"] = training(args.seed, args.training_duration)
        print(json.dumps({k: v for k, v in result["training"].items() if k != "placement"}, indent=1), flush=True)
    out = write_result(args.out, result)
    print(json.dumps({workload: result[workload]["targets"] for workload in GOODPUT}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
