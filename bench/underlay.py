"""The controller's underlay against the emulation's: the elephant and
link-failure scenarios on the demo fabric, seeds 1-5, each run with the
underlay installed by the emulation (ovs-ofctl, the spec's hash) and by the
controller on a fabric brought up bare (`--underlay ovs-bundle`: Open
vSwitch's bundle action, whose choice flow records and sFlow see). ECMP and
TE fractions of the optimum side by side.

    python -m bench.underlay  ->  bench/results/underlay.json
"""

from __future__ import annotations

import argparse
import platform
import statistics
from typing import Any

from bench import write_result
from controller.fabric import load_fabric
from controller.fabric.spec import DEFAULT_SPEC
from emulation.net import ovs
from emulation.scenarios.report import build_report
from emulation.scenarios.runner import UNDERLAYS, Sources, run_scenario
from emulation.workload import load_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", action="append", help="repeatable; default: elephant, link-failure")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--out", default="bench/results/underlay.json")
    args = parser.parse_args()
    ovs.check_running()
    fabric = load_fabric(DEFAULT_SPEC)
    results: dict[str, Any] = {"benchmark": "underlay", "host": platform.node(), "scenarios": {}}
    for name in args.scenario or ["elephant", "link-failure"]:
        workload = load_workload(name)
        per: dict[str, dict[str, list[float]]] = {u: {"ecmp": [], "te": []} for u in UNDERLAYS}
        for seed in args.seeds:
            for underlay in UNDERLAYS:
                sources = Sources(underlay=underlay)
                report = build_report(fabric, workload, seed, run_scenario(fabric, DEFAULT_SPEC, workload, seed,
                                                                           sources=sources), sources)  # fmt: skip
                for mode in ("ecmp", "te"):
                    per[underlay][mode].append(report.modes[mode].totals.judged_fraction())
                print(f"{name} seed {seed} underlay by {underlay}: "
                      + ", ".join(f"{m} {per[underlay][m][-1]:.1%}" for m in ("ecmp", "te")), flush=True)  # fmt: skip
            results["scenarios"][name] = {
                u: {m: {"per_seed": v, "mean": statistics.fmean(v)} for m, v in modes.items()}
                for u, modes in per.items()
            }
            write_result(args.out, results)
    print(write_result(args.out, results))


if __name__ == "__main__":
    main()
