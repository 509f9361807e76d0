"""Scenario benchmark: a scenario over several seeds, ECMP and TE side by side.

make bench-scenarios  ->  bench/results/scenarios.json
(python -m bench.scenarios --scenario elephant --seeds 1 2 3 4 5)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from typing import Any

from bench import write_result
from controller.fabric import load_fabric
from emulation.cli.scenario import with_ecmp_control
from emulation.model.stats import percentile
from emulation.net import ovs
from emulation.scenarios.records import ModeFigures, ScenarioReport
from emulation.scenarios.report import build_report
from emulation.scenarios.runner import run_scenario
from emulation.scenarios.table import table
from emulation.workload import load_workload, spec_file


def job_summary(reports: list[ScenarioReport]) -> dict:
    """Per job and seed, ECMP against TE: iteration time mean and p99, the
    optimum's, and TE's p99 over ECMP's; and over every job and seed, TE's
    mean iteration time over the optimum's."""
    out: dict[str, Any] = {"per_job": {}}
    te_total = optimum_total = 0.0
    for report in reports:
        for e, t in zip(report.modes["ecmp"].jobs, report.modes["te"].jobs):
            best = t.optimum_s
            ecmp_p99, te_p99 = e.iteration_s.p99, t.iteration_s.p99
            row = {
                "seed": report.seed,
                "optimum_s": best,
                "ecmp_mean_s": e.iteration_s.mean,
                "ecmp_p99_s": ecmp_p99,
                "te_mean_s": t.iteration_s.mean,
                "te_p99_s": te_p99,
                "te_p99_over_ecmp": te_p99 / ecmp_p99 if ecmp_p99 and te_p99 else None,
                "te_mean_over_optimum": t.slowdown_vs_optimum.mean,
                "ecmp_iterations": e.iterations_finished,
                "te_iterations": t.iterations_finished,
            }
            out["per_job"].setdefault(t.job, []).append(row)
            times = [s for _, s in t.times_s if s is not None]
            if best is not None:  # no live path in any stretch: no optimum to sum against
                te_total += sum(times)
                optimum_total += best * len(times)
    out["te_mean_over_optimum_all_jobs"] = te_total / optimum_total if optimum_total else None
    return out


def _over_seeds(runs: list[ModeFigures]) -> float:
    """Goodput over the optimum, summed over seeds."""
    return sum(m.totals.aggregate_mbps for m in runs) / sum(m.totals.optimum_mbps for m in runs)


def _incast_summary(runs: list[ModeFigures]) -> dict[str, list]:
    incasts = [m.incast for m in runs if m.incast is not None]
    return {
        "queue_p99_bytes": [m.bottleneck_queue.p99_bytes for m in runs],
        "converging_queue_p99_bytes": [i.converging_queue_p99_bytes for i in incasts],
        "drops": [m.drops for m in runs],
        "converging_drops": [i.converging_drops for i in incasts],
        "policed": [m.policed for m in runs],
        "senders_jain": [i.senders_jain for i in incasts],
        "bystander_share": [i.bystander_share for i in incasts],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", action="append", help="repeatable; default: elephant")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--spec")
    parser.add_argument("--out", default="bench/results/scenarios.json")
    args = parser.parse_args()
    ovs.check_running()
    results: dict[str, Any] = {"benchmark": "scenarios", "host": platform.node(), "scenarios": {}}
    for name in args.scenario or ["elephant"]:
        scenario = load_workload(name)
        spec_path = spec_file(scenario, args.spec)
        fabric = load_fabric(spec_path)
        per_seed = []
        for seed in args.seeds:
            runs = run_scenario(fabric, spec_path, scenario, seed)
            report = with_ecmp_control(build_report(fabric, scenario, seed, runs), fabric, scenario, seed)
            print(table(report), "\n", flush=True)
            per_seed.append(report)
        te = [r.modes["te"] for r in per_seed]
        ecmp = [r.modes["ecmp"] for r in per_seed]
        fixes = [t for m in te for t in m.te.collision_to_fix_s.all]
        results["scenarios"][name] = {
            "fabric": fabric.spec.name,
            "seeds": args.seeds,
            "summary": {
                "te_fraction_of_optimum": [m.totals.fraction_of_optimum for m in te],
                "ecmp_fraction_of_optimum": [m.totals.fraction_of_optimum for m in ecmp],
                "te_aggregate_over_seeds": _over_seeds(te),
                "ecmp_aggregate_over_seeds": _over_seeds(ecmp),
                "te_min_fraction": min(
                    (f for m in te if (f := m.totals.fraction_of_optimum) is not None), default=None
                ),
                # Per seed: its ECMP run read more than 5 points below the simulator's (control.py).
                "machine_short": [c.machine_short if (c := r.ecmp_against_simulator) else None for r in per_seed],
                "collision_to_fix_median_s": statistics.median(fixes) if fixes else None,
                "collision_to_fix_p99_s": percentile(fixes, 0.99) if fixes else None,
                "moves_per_flow_max": [m.te.moves_per_flow.max for m in te],
                "path_changes_per_flow_max": [m.te.path_changes_per_flow.max for m in te],
                "moves_in_steady_traffic": [m.te.moves_in_steady_traffic for m in te],
                "last_move_s": [m.te.last_move_s for m in te],
                "te_fraction_of_single_path": [m.totals.fraction_of_single_path for m in te],
                "reroutes": [m.te_decisions.get("reroute", 0) for m in te],
                "te_jain": [m.jain_fairness for m in te],
                "ecmp_jain": [m.jain_fairness for m in ecmp],
            },
            "reports": [r.as_json() for r in per_seed],
        }
        if te[0].incast is not None:
            results["scenarios"][name]["summary"]["incast"] = {
                mode: _incast_summary(ms) for mode, ms in (("ecmp", ecmp), ("te", te))
            }
        if te[0].jobs:
            results["scenarios"][name]["summary"]["jobs"] = job_summary(per_seed)
        print(json.dumps(results["scenarios"][name]["summary"], indent=2), flush=True)
    out = write_result(args.out, results)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
