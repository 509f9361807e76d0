"""TE at fabric scale, on the flow-level simulator (emulation/simulate): the
real engine in a closed loop with the fluid model (flows sharing links as
TCP does) of the 2,048-GPU and 16,384-GPU specs.

Per fabric and scenario (`elephant`, a full cross-pod permutation of TCP
elephants; `job-mix-large`, a job mix filling >= 90% of the GPUs):

- ECMP (the underlay's 5-tuple hash) and ideal packet spraying, as fractions
  of the exact (LP) max-min optimum;
- TE's fraction of the optimum per cycle, the cycles it takes to reach 97%
  and hold it;
- moves over the last 100 cycles (steady state, ±30% telemetry noise);
- the engine's step time p50/p99, and where the loop's time goes;
- the simulator's speed: simulated seconds per wall second of the loop
  (the one-time optimum solve and setup excluded, reported apart).

    make bench-scale  ->  bench/results/scale.json
    (python -m bench.scale --fabric rail-2k --workload elephant --cycles 40)
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from typing import Any

from bench import write_result
from bench.simulated import simulated
from emulation.model.jsonable import plain
from emulation.simulate.run import STEADY_CYCLES
from emulation.workload import load_workload

FABRICS = ("rail-2k", "ft2-16k")
THREE_TIER = ("meta-32k",)  # make bench-three-tier
WORKLOADS = ("elephant", "job-mix-large")
SETTLE_CYCLES = 25  # before the steady window


def run_one(fabric_name: str, workload_name: str, seed: int, cycles: int) -> dict[str, Any]:
    started = time.perf_counter()
    workload = load_workload(workload_name)
    result, build_s = simulated(fabric_name, workload, seed, cycles * workload.telemetry.interval_s)
    goal, loop, phase = result.te.goal, result.te.loop, result.goodput_phases[-1]
    assert goal is not None  # a goodput workload
    return {
        "fabric": fabric_name,
        "gpus": result.gpus,
        "workload": workload_name,
        "flows": result.flows,
        "seed": seed,
        "fabric_build_and_warm_s": build_s,
        "placement": plain(result.placement),
        "optimum": plain(phase.optimum),
        "ecmp_fraction_of_optimum": phase.ecmp.fraction_of_optimum,
        "ecmp_collided_uplinks": phase.ecmp.collided_uplinks,
        "spray_fraction_of_optimum": phase.spray.fraction_of_optimum,
        "te_fraction_of_optimum_per_cycle": [c.fraction_of_optimum for c in result.cycles],
        "te_fraction_of_optimum_final": goal.fraction_of_optimum_final,
        "te_cycles_to_97": goal.cycles_to_target,
        "te_cycles_to_97_and_holds": goal.cycles_to_target_and_holds,
        "te_min_fraction_steady": goal.fraction_of_optimum_min_last_100,
        "reroutes_total": loop.reroutes_total,
        "reroutes_per_cycle_max": loop.reroutes_per_cycle_max,
        "steady_cycles": loop.steady_cycles,
        "moves_steady": loop.reroutes_steady,
        "flow_mods_total": loop.flow_mods_total,
        "flow_mods_steady": loop.flow_mods_steady,
        "path_changes_per_flow_max": loop.path_changes_per_flow_max,
        "engine_step_s": plain(loop.engine_step_s),
        "engine_step_cpu_s": plain(loop.engine_step_cpu_s),
        "loop_time_split_s": plain(loop.time_split_s),
        "simulated_s": loop.simulated_s,
        "sim_s_per_wall_s": loop.sim_s_per_wall_s,
        "setup_s": result.setup_s,
        "wall_s": time.perf_counter() - started,
        "noise": result.telemetry.noise,
        "interval_s": result.telemetry.interval_s,
    }


def summary_line(r: dict[str, Any]) -> str:
    step = r["engine_step_s"]
    return (
        f"{r['fabric']:8s} {r['workload']:14s} ECMP {r['ecmp_fraction_of_optimum']:6.1%}  "
        f"spray {r['spray_fraction_of_optimum']:6.1%}  TE final {r['te_fraction_of_optimum_final']:6.1%}  "
        f"97% after {r['te_cycles_to_97_and_holds']} cycle(s)  moves in last {r['steady_cycles']}: "
        f"{r['moves_steady']}  step p50/p99 {step['p50'] * 1e3:.0f}/{step['p99'] * 1e3:.0f} ms "
        f"(CPU {r['engine_step_cpu_s']['p99'] * 1e3:.0f} ms)  "
        f"speed {r['sim_s_per_wall_s']:.2f} sim s/wall s  optimum {r['optimum']['solve_s']:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--fabric", action="append", choices=FABRICS + THREE_TIER, help=f"repeatable; default: {' '.join(FABRICS)}"
    )
    parser.add_argument("--workload", action="append", help=f"repeatable; default: {' '.join(WORKLOADS)}")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--cycles",
        type=int,
        default=SETTLE_CYCLES + STEADY_CYCLES,
        help=f"TE cycles per run (the last {STEADY_CYCLES} are the steady window)",
    )
    parser.add_argument("--out", default="bench/results/scale.json")
    args = parser.parse_args()
    runs = []
    for fabric_name in args.fabric or FABRICS:
        for workload_name in args.workload or WORKLOADS:
            runs.append(run_one(fabric_name, workload_name, args.seed, args.cycles))
            print(summary_line(runs[-1]), flush=True)
    result = {"benchmark": "scale", "host": platform.node(), "runs": runs}
    out = write_result(args.out, result)
    print(json.dumps([{k: v for k, v in r.items() if k != "te_fraction_of_optimum_per_cycle"} for r in runs], indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
