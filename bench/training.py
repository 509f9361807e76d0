"""Training iterations at fabric scale, on the flow-level simulator
(emulation/simulate): the `training-mix-large` scenario (jobs of 64-1024
GPUs iterating bulk-synchronously) on the 2,048-GPU and 16,384-GPU specs,
five arms side by side with each job's p50/p99 iteration time:
first-fit+ecmp, topology+ecmp, spray, railyard+te and the optimum.

Targets, as ratios of the same run (the slowdown of an iteration is its
time over its job's optimum; p99 over every iteration of every job):

- Railyard near the optimum: railyard+te's p99 slowdown <= 1.10;
- better than topology-aware packing: railyard+te's p99 slowdown at most
  0.90 x topology+ecmp's (>= 10% better);
- better than first-fit wherever ECMP collides: for each job whose
  first-fit+ecmp iterations collide (its p99 above COLLIDED x the bound of
  its own placement: the routing slowed it, not the placement), railyard+te's
  p99 iteration time at most 0.70 x first-fit+ecmp's (>= 30% better).

A seed draws the job mix and the source ports (hence ECMP's collisions):
the 2K spec runs seeds 1-5 (a few seconds each), the 16K spec seed 1
(about a minute); `--seed` (repeatable) sets them for every fabric.

    make bench-training  ->  bench/results/training.json
    (python -m bench.training --fabric rail-2k --seed 4 --duration 10)
"""

from __future__ import annotations

import argparse
import platform
import time
from typing import Any

from bench import write_result
from bench.simulated import simulated
from emulation.simulate.arms import FIRST_FIT_ECMP, RAILYARD_TE, TOPOLOGY_ECMP
from emulation.simulate.records import IterationFigures, SimulationReport
from emulation.simulate.report import table
from emulation.workload import load_workload

FABRICS = ("rail-2k", "ft2-16k")
SEEDS = {"rail-2k": (1, 2, 3, 4, 5), "ft2-16k": (1,)}
SCENARIO = "training-mix-large"
NEAR_OPTIMUM = 1.10
VS_TOPOLOGY = 0.90
VS_FIRST_FIT = 0.70
COLLIDED = 1.05  # an iteration 5% over its own placement's bound: something on the fabric slowed it


def targets(result: SimulationReport) -> dict[str, Any]:
    arms = result.arms or {}
    te, topology, first_fit = arms[RAILYARD_TE], arms[TOPOLOGY_ECMP], arms[FIRST_FIT_ECMP]
    te_p99 = te.overall.slowdown_p99
    topology_p99 = topology.overall.slowdown_p99
    collided = {
        job: row
        for job, row in first_fit.jobs.items()
        if row.iterations and row.p99_s > COLLIDED * (row.own_optimum_s or 0.0)
    }
    per_job = {job: te.jobs[job].p99_s / row.p99_s for job, row in collided.items() if _ran(te.jobs.get(job))}
    worst = max(per_job.values(), default=None)
    # Pooled over every iteration, one slow job hides among many fast ones: its own p99 is judged too.
    worst_job = max((row.slowdown_p99 for row in te.jobs.values() if row.iterations), default=0.0)
    return {
        "railyard_p99_over_optimum": {"ratio": te_p99, "target": NEAR_OPTIMUM, "met": te_p99 <= NEAR_OPTIMUM},
        "railyard_worst_job_p99_over_optimum": {
            "ratio": worst_job,
            "target": NEAR_OPTIMUM,
            "met": worst_job <= NEAR_OPTIMUM,
        },
        "railyard_p99_over_topology_ecmp": {
            "ratio": te_p99 / topology_p99 if topology_p99 else None,
            "target": VS_TOPOLOGY,
            "met": bool(topology_p99) and te_p99 <= VS_TOPOLOGY * topology_p99,
        },
        "railyard_p99_over_first_fit_ecmp_where_ecmp_collides": {
            "jobs_colliding": len(collided),
            "per_job": per_job,
            "worst_ratio": worst,
            "target": VS_FIRST_FIT,
            "met": None if worst is None else worst <= VS_FIRST_FIT,
        },
    }


def _ran(row: IterationFigures | None) -> bool:
    return row is not None and row.iterations > 0


def run_one(fabric_name: str, seed: int, duration_s: float | None) -> tuple[SimulationReport, dict[str, Any]]:
    """The simulation, and its JSON with the run's wall time and targets."""
    started = time.perf_counter()
    report, _ = simulated(fabric_name, load_workload(SCENARIO), seed, duration_s)
    wall_s = time.perf_counter() - started
    return report, {**report.as_json(), "wall_s": wall_s, "targets": targets(report)}


def target_lines(result: dict) -> list[str]:
    t = result["targets"]
    near, topo, ff = (
        t["railyard_p99_over_optimum"],
        t["railyard_p99_over_topology_ecmp"],
        t["railyard_p99_over_first_fit_ecmp_where_ecmp_collides"],
    )

    def verdict(met: bool | None) -> str:
        return "n/a (no such job)" if met is None else ("met" if met else "NOT met")

    topo_ratio = "-" if topo["ratio"] is None else f"{topo['ratio']:.3f}"
    ff_ratio = "-" if ff["worst_ratio"] is None else f"{ff['worst_ratio']:.3f}"
    return [
        f"targets on {result['fabric']}, seed {result['seed']} (wall {result['wall_s']:.0f} s):",
        f"  railyard+te p99 slowdown {near['ratio']:.3f} <= {near['target']:.2f}: {verdict(near['met'])}",
        f"  railyard+te worst job's p99 slowdown {t['railyard_worst_job_p99_over_optimum']['ratio']:.3f}"
        f" <= {near['target']:.2f}: {verdict(t['railyard_worst_job_p99_over_optimum']['met'])}",
        f"  railyard+te p99 / topology+ecmp p99 {topo_ratio} <= {topo['target']:.2f}: {verdict(topo['met'])}",
        f"  railyard+te p99 / first-fit+ecmp p99, worst of {ff['jobs_colliding']} job(s) whose ECMP iterations "
        f"collide: {ff_ratio} <= {ff['target']:.2f}: {verdict(ff['met'])}",
    ]


def summary_line(fabric: str, runs: list[dict]) -> str:
    """How many of a fabric's runs met each target."""
    names = {
        "railyard_p99_over_optimum": "near the optimum",
        "railyard_worst_job_p99_over_optimum": "every job near the optimum",
        "railyard_p99_over_topology_ecmp": ">= 10% better than topology+ecmp",
        "railyard_p99_over_first_fit_ecmp_where_ecmp_collides": ">= 30% better than first-fit+ecmp where ECMP collides",
    }
    parts = []
    for key, name in names.items():
        verdicts = [r["targets"][key]["met"] for r in runs]
        judged = [v for v in verdicts if v is not None]
        parts.append(
            f"{name}: {sum(judged)}/{len(judged)}"
            + (f" ({len(verdicts) - len(judged)} n/a)" if len(judged) < len(verdicts) else "")
        )
    # Where topology-aware packing is already at the optimum there is nothing to be 10% better than:
    # over the runs, the mean ratio says how much better Railyard is where it can be.
    ratios = [r["targets"]["railyard_p99_over_topology_ecmp"]["ratio"] for r in runs]
    ratios = [x for x in ratios if x is not None]
    if ratios:
        parts.append(f"p99 / topology+ecmp's over the runs: mean {sum(ratios) / len(ratios):.3f}")
    return f"{fabric}, seeds {', '.join(str(r['seed']) for r in runs)}: " + "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fabric", action="append", choices=FABRICS, help=f"repeatable; default: {' '.join(FABRICS)}")
    parser.add_argument("--seed", type=int, action="append", help="repeatable; default: 1-5 on rail-2k, 1 on ft2-16k")
    parser.add_argument("--duration", type=float, help="simulated seconds (default: the scenario's)")
    parser.add_argument("--out", default="bench/results/training.json")
    args = parser.parse_args()
    runs = []
    for fabric_name in args.fabric or FABRICS:
        for seed in args.seed or SEEDS[fabric_name]:
            report, run = run_one(fabric_name, seed, args.duration)
            print(table(report))
            print("\n".join(target_lines(run)), flush=True)
            runs.append(run)
    summary = [
        summary_line(fabric, [r for r in runs if r["fabric"] == fabric])
        for fabric in dict.fromkeys(r["fabric"] for r in runs)
    ]
    print("\n".join(summary))
    result = {"benchmark": "training", "host": platform.node(), "scenario": SCENARIO, "summary": summary, "runs": runs}
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    main()
