"""Advisory mode on the demo's collision: the elephant scenario, seed 3, run
with TE programming the switches and again with `--southbound none`. The
moves TE recommends must be the ones it makes when it may program (uplink
for uplink: of two elephants on one uplink either may be picked), and the
advisory controller sends nothing.

    python -m bench.advisory  ->  bench/results/advisory.json
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench import write_result
from controller.fabric import addressing as ad
from controller.fabric import load_fabric
from controller.fabric.spec import DEFAULT_SPEC
from emulation.net import ovs
from emulation.scenarios.runner import ScenarioMode, Sources, run_mode
from emulation.workload import load_workload


def moves(decisions) -> list[tuple[str, str, str]]:
    """(flow, from via, to via) of every reroute of the run."""
    return sorted((d.subject, *(d.vias or ("", ""))) for d in decisions if d.kind == "reroute")


def plan(fabric, decisions) -> list[tuple[str, str, str]]:
    """The moves by what they relieve: (the flow's ingress leaf, from via, to via). Of two elephants
    colliding on one uplink either may move, so which one the engine picks may differ between two
    runs, whose records differ by their noise; the uplinks relieved and where their load goes may not."""
    out = []
    for flow, old, new in moves(decisions):
        src = ad.parse_nic_address(flow.split(":")[0])
        out.append((fabric.attachment(src).node, old, new))
    return sorted(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--telemetry", default="agent", choices=("agent", "sflow"))
    parser.add_argument("--out", default="bench/results/advisory.json")
    args = parser.parse_args()
    ovs.check_running()
    fabric, workload = load_fabric(DEFAULT_SPEC), load_workload("elephant")
    runs = {}
    with tempfile.TemporaryDirectory(prefix="railyard-bench-") as tmp:
        for programs in (True, False):
            source = Sources(args.telemetry, programs=programs)
            runs[programs] = run_mode(
                fabric, DEFAULT_SPEC, workload, args.seed, ScenarioMode.TE, Path(tmp), lambda _: None, None, source
            )
    made, recommended = moves(runs[True].decisions), moves(runs[False].decisions)
    result = {
        "benchmark": "advisory",
        "seed": args.seed,
        "telemetry": args.telemetry,
        "moves_made": made,
        "moves_recommended": recommended,
        "same_flows": made == recommended,
        "plan_made": plan(fabric, runs[True].decisions),
        "plan_recommended": plan(fabric, runs[False].decisions),
        "same_plan": plan(fabric, runs[True].decisions) == plan(fabric, runs[False].decisions),
        "flow_mods_programming": runs[True].flow_mods,
        "flow_mods_advisory": runs[False].flow_mods,
        "reroutes_recommended_over_run": sum(d.kind == "reroute" for d in runs[False].decisions),
    }
    print(result)
    print(write_result(args.out, result))


if __name__ == "__main__":
    main()
