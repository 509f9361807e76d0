"""Advisory mode on the demo's collision: the elephant scenario, seed 3, run
with TE programming the switches and again with `--southbound none`. The
moves TE recommends in its first cycles must be the ones it makes when it
may program, and in advisory mode no switch gains or loses an entry.

    python -m bench.advisory  ->  bench/results/advisory.json
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench import write_result
from controller.fabric import load_fabric
from controller.fabric.spec import DEFAULT_SPEC
from emulation.net import ovs
from emulation.scenarios.runner import Sources, run_mode
from emulation.workload import load_workload


def first_moves(decisions) -> list[tuple[str, str, str]]:
    """(flow, from via, to via) of every reroute decided in the first cycle that made one."""
    moves = [d for d in decisions if d.kind == "reroute"]
    if not moves:
        return []
    first = min(d.at_s for d in moves)
    return sorted((d.subject, *(d.vias or ("", ""))) for d in moves if d.at_s - first < 0.15)


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
            runs[programs] = run_mode(fabric, DEFAULT_SPEC, workload, args.seed, "te", Path(tmp), lambda _: None,
                                      None, source)  # fmt: skip
    made, recommended = first_moves(runs[True].decisions), first_moves(runs[False].decisions)
    result = {
        "benchmark": "advisory",
        "seed": args.seed,
        "telemetry": args.telemetry,
        "moves_made_first_cycle": made,
        "moves_recommended_first_cycle": recommended,
        "same": made == recommended,
        "flow_mods_programming": runs[True].flow_mods,
        "flow_mods_advisory": runs[False].flow_mods,
        "reroutes_recommended_over_run": sum(d.kind == "reroute" for d in runs[False].decisions),
    }
    print(result)
    print(write_result(args.out, result))


if __name__ == "__main__":
    main()
