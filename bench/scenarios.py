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
from emulation.net import ovs
from emulation.scenarios.report import build_report, table
from emulation.scenarios.runner import run_scenario
from emulation.scenarios.spec import load_scenario


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
        scenario = load_scenario(name)
        spec_path = scenario.spec_path(args.spec)
        fabric = load_fabric(spec_path)
        per_seed = []
        for seed in args.seeds:
            runs = run_scenario(fabric, spec_path, scenario, seed)
            report = build_report(fabric, scenario, seed, runs)
            print(table(report), "\n", flush=True)
            per_seed.append(report)
        te = [r["modes"]["te"] for r in per_seed]
        ecmp = [r["modes"]["ecmp"] for r in per_seed]
        fixes = [t for m in te for t in m["collision_to_fix_s"]["all"]]
        results["scenarios"][name] = {
            "fabric": fabric.spec.name,
            "seeds": args.seeds,
            "summary": {
                "te_fraction_of_optimum": [m["fraction_of_optimum"] for m in te],
                "ecmp_fraction_of_optimum": [m["fraction_of_optimum"] for m in ecmp],
                "te_aggregate_over_seeds": sum(m["aggregate_mbps"] for m in te) / sum(m["optimum_mbps"] for m in te),
                "ecmp_aggregate_over_seeds": sum(m["aggregate_mbps"] for m in ecmp)
                / sum(m["optimum_mbps"] for m in ecmp),
                "te_min_fraction": min(m["fraction_of_optimum"] for m in te),
                "collision_to_fix_median_s": statistics.median(fixes) if fixes else None,
                "collision_to_fix_p99_s": sorted(fixes)[min(len(fixes) - 1, int(0.99 * len(fixes)))] if fixes else None,
                "moves_per_flow_max": [m["moves_per_flow"]["max"] for m in te],
                "path_changes_per_flow_max": [m["path_changes_per_flow"]["max"] for m in te],
                "moves_in_steady_traffic": [m["moves_in_steady_traffic"] for m in te],
                "last_move_s": [m["last_move_s"] for m in te],
                "te_fraction_of_single_path": [m["fraction_of_single_path"] for m in te],
                "reroutes": [m["te_decisions"].get("reroute", 0) for m in te],
                "te_jain": [m["jain_fairness"] for m in te],
                "ecmp_jain": [m["jain_fairness"] for m in ecmp],
            },
            "reports": per_seed,
        }
        if "incast" in te[0]:
            results["scenarios"][name]["summary"]["incast"] = {
                mode: {
                    "queue_p99_bytes": [m["bottleneck_queue"]["p99_bytes"] for m in ms],
                    "drops": [m["drops"] for m in ms],
                    "policed": [m["policed"] for m in ms],
                    "senders_jain": [m["incast"]["senders_jain"] for m in ms],
                    "bystander_share": [m["incast"]["bystander_share"] for m in ms],
                }
                for mode, ms in (("ecmp", ecmp), ("te", te))
            }
        print(json.dumps(results["scenarios"][name]["summary"], indent=2), flush=True)
    out = write_result(args.out, results)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
