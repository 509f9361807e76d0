"""TE on each telemetry source, side by side: the elephant scenario on the
demo, narrow-uplinks and three-tier specs, seeds 1-5, with TE fed by the
emulation's agent, by the switches' own sFlow agents, and by the
controller's OpenFlow port statistics. One ECMP run per spec and seed (it
has no controller, so no telemetry) is judged with each TE run.

Per spec and source: TE's fraction of the optimum per seed, collision-to-fix
median and p99 over every collision of the five seeds, path changes per flow.

    make bench-telemetry  ->  bench/results/telemetry.json
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench import write_result
from controller.fabric import load_fabric
from controller.fabric.spec import SPECS_DIR
from emulation.model.stats import percentile
from emulation.net import ovs
from emulation.net.fabric import sflow_sampling
from emulation.scenarios.records import ScenarioReport
from emulation.scenarios.report import build_report
from emulation.scenarios.runner import TELEMETRY, ScenarioMode, Sources, run_mode
from emulation.workload import load_workload

SPECS = ("default.yaml", "narrow-uplinks.yaml", "three-tier.yaml")


def summary(reports: list[ScenarioReport]) -> dict:
    te = [r.modes["te"] for r in reports]
    fixes = sorted(t for m in te for t in m.te.collision_to_fix_s.all)
    return {
        "te_fraction_of_optimum": [m.totals.fraction_of_optimum for m in te],
        "te_min_fraction": min(m.totals.judged_fraction() for m in te),
        "ecmp_fraction_of_optimum": [r.modes["ecmp"].totals.fraction_of_optimum for r in reports],
        "collisions_fixed": len(fixes),
        "collisions_unfixed": sum(m.te.collision_to_fix_s.unfixed for m in te),
        "collision_to_fix_median_s": statistics.median(fixes) if fixes else None,
        "collision_to_fix_p99_s": percentile(fixes, 0.99) if fixes else None,
        "path_changes_per_flow_mean": [m.te.path_changes_per_flow.mean for m in te],
        "path_changes_per_flow_max": [m.te.path_changes_per_flow.max for m in te],
        "reroutes": [m.te_decisions.get("reroute", 0) for m in te],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", action="append", help="repeatable; default: " + ", ".join(SPECS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--telemetry", action="append", choices=TELEMETRY, help="repeatable; default: all three")
    parser.add_argument("--scenario", default="elephant")
    parser.add_argument("--out", default="bench/results/telemetry.json")
    args = parser.parse_args()
    ovs.check_running()
    sources = args.telemetry or list(TELEMETRY)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    results: dict[str, Any] = {"benchmark": "telemetry", "host": platform.node(), "commit": commit, "specs": {}}
    workload = load_workload(args.scenario)
    for spec in args.spec or SPECS:
        spec_path = SPECS_DIR / spec
        fabric = load_fabric(spec_path)
        per_source: dict[str, list[ScenarioReport]] = {s: [] for s in sources}
        entry = results["specs"][fabric.spec.name] = {"spec": spec, "sflow_sampling": sflow_sampling(fabric)}
        for seed in args.seeds:
            with tempfile.TemporaryDirectory(prefix="railyard-bench-") as tmp:
                ecmp = run_mode(fabric, spec_path, workload, seed, ScenarioMode.ECMP, Path(tmp), lambda _: None)
                for source in sources:
                    te = run_mode(
                        fabric,
                        spec_path,
                        workload,
                        seed,
                        ScenarioMode.TE,
                        Path(tmp),
                        lambda _: None,
                        None,
                        Sources(source),
                    )
                    report = build_report(
                        fabric, workload, seed, {ScenarioMode.ECMP: ecmp, ScenarioMode.TE: te}, Sources(source)
                    )
                    figures = report.modes["te"]
                    fix = figures.te.collision_to_fix_s
                    print(
                        f"{fabric.spec.name} seed {seed} {source}: TE {figures.totals.judged_fraction():.1%} "
                        f"(ECMP {report.modes['ecmp'].totals.judged_fraction():.1%}), fix median {fix.median} "
                        f"p99 {fix.p99}, path changes/flow {figures.te.path_changes_per_flow.mean:.2f}",
                        flush=True,
                    )
                    per_source[source].append(report)
            entry["summary"] = {s: summary(rs) for s, rs in per_source.items() if rs}
            entry["reports"] = {s: [r.as_json() for r in rs] for s, rs in per_source.items()}
            write_result(args.out, results)  # after every seed: a cut-short run keeps what it measured
    print(write_result(args.out, results))


if __name__ == "__main__":
    main()
