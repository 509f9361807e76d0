"""Hedera's testbed benchmark suite (NSDI 2010) on Railyard: the authors' 30
patterns (their own input files, bench/hedera_suite.py) on the k=4 fat
tree, emulated and simulated, ECMP and TE, beside Hedera's published
ECMP, Global First Fit and Simulated Annealing figures.

make bench-hedera  ->  bench/results/hedera.json
(python -m bench.hedera --seeds 1 2 3 [--pattern randbij0 ...] [--no-emulation]
 [--keep DIR | --keep-misses DIR])

Railyard's figures are fractions of the exact max-min optimum of the same
flows (the emulated report's, goodput from each TCP flow's second second
on; the simulator's, its TE cycles from the same second on). Hedera's are
fractions of their non-blocking switch, the testbed's own ceiling, capped
at 100 % (their two-chip switch read above it on a few patterns). The
targets of the issue that asked for this: TE's mean >= 98 % over the 30
patterns, every pattern >= 95 %, every randbij and stride >= 97 %, TE >=
ECMP on every pattern and seed, at most 2 path changes per flow, and the
simulator within 5 points of the emulation on every pattern, ECMP and TE.

Beside each emulated TE figure, what the routing TE had in that run was
worth in the fluid model (`te_routing`: its path changes replayed over the
same 5-tuples' hash routing, emulation/simulate/replay.py, time-weighted
over the judged window; `te_routing_end`: as it ended; `te_routing_strays`:
flows TE moved that are not the workload's, left out). The emulated figure
below it is TCP's uneven sharing of bottlenecks, which no routing changes.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from bench import write_result
from bench.crossval import emulated_run, simulated_fractions
from bench.hedera_suite import PATTERNS, Pattern, published
from controller.fabric import load_fabric
from controller.te.engine.state import DecisionKind
from emulation.model.jsonable import plain
from emulation.net import ovs
from emulation.simulate.run import simulate
from emulation.workload import Workload, load_workload, spec_file

TOLERANCE_POINTS = 5.0
# The decisions that change a routing; a run with none routed exactly as ECMP's did.
ACTIONS = (DecisionKind.REROUTE, DecisionKind.INCAST, DecisionKind.REVERT)
TARGETS = {"te_mean": 0.98, "te_min": 0.95, "te_min_randbij_stride": 0.97, "path_changes_max": 2}


def emulated(workload: Workload, seed: int, keep: Path | None) -> dict[str, Any]:
    run = emulated_run(workload, seed, keep)
    report = run.report
    strays = set(run.te_routing.strays) if run.te_routing else set()
    te, ecmp = report.modes["te"], report.modes["ecmp"]
    return {
        # What TE's routing in this run was worth in the fluid model: the
        # emulated figure's shortfall from it is TCP's sharing, not routing.
        "te_routing": run.te_routing.mean if run.te_routing else None,
        "te_routing_end": run.te_routing.end if run.te_routing else None,
        "te_routing_strays": [list(key) for key in run.te_routing.strays] if run.te_routing else [],
        "ecmp": ecmp.totals.judged_fraction(),
        "te": te.totals.judged_fraction(),
        # The aggregate's own ratio, beside the credited figure: above it where TCP shares a NIC unevenly.
        "ecmp_aggregate": ecmp.totals.aggregate_over_optimum,
        "te_aggregate": te.totals.aggregate_over_optimum,
        "path_changes_per_flow_max": te.te.path_changes_per_flow.max,
        "reroutes": te.te_decisions.get("reroute", 0),
        "reverts": te.te_decisions.get("revert", 0),
        # Reroutes, meters and reverts of the workload's flows: with none,
        # TE's routing was the hash's. A stray's move (iperf3's control
        # connection, at the end of the run) changes none of their paths.
        "te_actions": sum(te.te_decisions.get(kind, 0) for kind in ACTIONS)
        - sum(1 for change in run.changes if change.key in strays and change.via),
        "moves_in_steady_traffic": te.te.moves_in_steady_traffic,
        "collision_to_fix_median_s": te.te.collision_to_fix_s.median,
        "flow_errors": report.failed_flows,
        # The machine's CPUs while each run's traffic ran: a shared VM's steal
        # starves the userspace datapath, in both runs alike.
        "host_cpu": {mode: plain(report.modes[mode].host_cpu) for mode in ("ecmp", "te")},
    }


def simulated(workload: Workload, seed: int) -> dict[str, Any]:
    fabric = load_fabric(spec_file(workload))
    result = simulate(fabric, workload, seed)
    fractions = simulated_fractions(result)
    return {**fractions, "path_changes_per_flow_max": result.te.loop.path_changes_per_flow_max}


def run_pattern(
    pattern: Pattern, seeds: list[int], emulate: bool, keep: Path | None = None, keep_misses: Path | None = None
) -> dict[str, Any]:
    """`keep`: every emulated run's artefacts there; `keep_misses`: only
    those of a run that misses a per-run target (misses), each in a
    directory of its own, so that a rare miss can be read afterwards."""
    workload = load_workload(f"hedera/{pattern.name}")
    hedera = published()[pattern.label]
    runs = []
    for seed in seeds:
        run: dict[str, Any] = {"seed": seed, "simulated": simulated(workload, seed)}
        if emulate:
            where = keep
            if keep_misses is not None:
                where = keep_misses / f"{pattern.name}-seed{seed}-{time.strftime('%Y%m%dT%H%M%S')}"
            run["emulated"] = emulated(workload, seed, where)
            run["missed"] = misses(pattern.name, run["emulated"])
            if keep_misses is not None and where is not None and not run["missed"]:
                shutil.rmtree(where, ignore_errors=True)
            run["difference_points"] = {
                mode: 100 * (run["simulated"][mode] - run["emulated"][mode]) for mode in ("ecmp", "te")
            }
        runs.append(run)
        print(_line(pattern, run), flush=True)
    return {
        "pattern": pattern.label,
        "scenario": f"hedera/{pattern.name}",
        "hedera": {name: min(getattr(hedera, name) / hedera.nonblocking, 1.0) for name in ("ecmp", "gff", "sa")},
        "hedera_mbps": vars(hedera),
        "runs": runs,
    }


def misses(name: str, run: dict[str, Any]) -> list[str]:
    """The per-run targets one emulated run misses (the mean's is the suite's)."""
    floor = TARGETS["te_min_randbij_stride"] if name.startswith(("randbij", "stride")) else TARGETS["te_min"]
    out = []
    if run["te"] < floor:
        out.append(f"TE {run['te']:.1%} < {floor:.0%}")
    if run["te"] < run["ecmp"] and run["te_actions"] > 0:
        out.append(f"TE {run['te']:.1%} < ECMP {run['ecmp']:.1%} after acting")
    if run["path_changes_per_flow_max"] > TARGETS["path_changes_max"]:
        out.append(f"{run['path_changes_per_flow_max']} path changes of one flow > {TARGETS['path_changes_max']}")
    return out


def _line(pattern: Pattern, run: dict[str, Any]) -> str:
    sim = run["simulated"]
    text = f"{pattern.label:16} seed {run['seed']}: simulated ECMP {sim['ecmp']:6.1%} TE {sim['te']:6.1%}"
    if "emulated" in run:
        emu = run["emulated"]
        text += (
            f"; emulated ECMP {emu['ecmp']:6.1%} TE {emu['te']:6.1%}, {emu['reroutes']} reroutes,"
            f" path changes per flow <= {emu['path_changes_per_flow_max']}"
        )
        if emu["te_routing"] is not None:
            text += f"; TE's routing, fluid {emu['te_routing']:6.1%} (at the end {emu['te_routing_end']:6.1%})"
        stolen = [cpu["stolen"] for cpu in emu["host_cpu"].values() if cpu is not None]
        if stolen:
            text += f"; CPU stolen {max(stolen):.1%}"
        if run["missed"]:
            text += f"; MISSED: {', '.join(run['missed'])}"
        if emu["te_routing_strays"]:
            text += f"; {len(emu['te_routing_strays'])} flows moved that the workload does not have"
    return text


def summary(patterns: list[dict[str, Any]], emulate: bool) -> dict[str, Any]:
    world = "emulated" if emulate else "simulated"
    te = {p["pattern"]: statistics.fmean(r[world]["te"] for r in p["runs"]) for p in patterns}
    worst = {p["pattern"]: min(r[world]["te"] for r in p["runs"]) for p in patterns}
    strict = [p for p in worst if p.startswith(("randbij", "stride"))]
    below = [
        (p["pattern"], r["seed"], r[world].get("te_actions", 1) > 0)
        for p in patterns
        for r in p["runs"]
        if r[world]["te"] < r[world]["ecmp"]
    ]
    out: dict[str, Any] = {
        "judged_on": world,
        "te_mean": statistics.fmean(te.values()),
        "te_min": min(worst.values()),
        "te_min_randbij_stride": min((worst[p] for p in strict), default=None),
        # Below ECMP after acting, against below it with the hash's own
        # routing: two emulated runs of one routing differ by run noise.
        "te_below_ecmp": [(p, s) for p, s, acted in below if acted],
        "te_below_ecmp_without_acting": [(p, s) for p, s, acted in below if not acted],
        "path_changes_max": max(r[world]["path_changes_per_flow_max"] for p in patterns for r in p["runs"]),
        "hedera_sa_mean": statistics.fmean(p["hedera"]["sa"] for p in patterns),
        "hedera_gff_mean": statistics.fmean(p["hedera"]["gff"] for p in patterns),
        "te_below_hedera_sa": sorted(p["pattern"] for p in patterns if te[p["pattern"]] < p["hedera"]["sa"]),
    }
    if emulate:
        worth = [r[world]["te_routing"] for p in patterns for r in p["runs"] if r[world]["te_routing"] is not None]
        out["te_routing_mean"] = statistics.fmean(worth) if worth else None
        diffs = [abs(d) for p in patterns for r in p["runs"] for d in r["difference_points"].values()]
        out["simulator_within_points"] = TOLERANCE_POINTS
        out["simulator_agrees"] = sum(
            all(abs(d) <= TOLERANCE_POINTS for d in r["difference_points"].values())
            for p in patterns
            for r in p["runs"]
        )
        out["simulator_cases"] = sum(len(p["runs"]) for p in patterns)
        out["simulator_max_difference_points"] = max(diffs, default=0.0)
    out["targets"] = {
        "te_mean": out["te_mean"] >= TARGETS["te_mean"],
        "te_min": out["te_min"] >= TARGETS["te_min"],
        "te_min_randbij_stride": (out["te_min_randbij_stride"] or 1.0) >= TARGETS["te_min_randbij_stride"],
        "te_never_below_ecmp": not out["te_below_ecmp"],
        "path_changes": out["path_changes_max"] <= TARGETS["path_changes_max"],
    }
    return out


def table(patterns: list[dict[str, Any]], emulate: bool) -> str:
    head = "| pattern | Hedera ECMP | Hedera GFF | Hedera SA | Railyard ECMP | Railyard TE | path changes max |"
    lines = [head + (" TE's routing, fluid |" if emulate else ""), "|" + "---|" * (8 if emulate else 7)]
    world = "emulated" if emulate else "simulated"
    for p in patterns:
        runs = [r[world] for r in p["runs"]]
        h = p["hedera"]
        worth = [r["te_routing"] for r in runs if r.get("te_routing") is not None]
        lines.append(
            f"| {p['pattern']} | {h['ecmp']:.1%} | {h['gff']:.1%} | {h['sa']:.1%}"
            f" | {statistics.fmean(r['ecmp'] for r in runs):.1%} | {statistics.fmean(r['te'] for r in runs):.1%}"
            f" | {max(r['path_changes_per_flow_max'] for r in runs)} |"
            + (f" {statistics.fmean(worth):.1%} |" if worth else " |" if emulate else "")
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--pattern", action="append", help="a scenario name of the suite (repeatable; default: all)")
    parser.add_argument("--no-emulation", action="store_true", help="the simulator only (no root, minutes)")
    parser.add_argument("--out", default="bench/results/hedera.json")
    kept = parser.add_mutually_exclusive_group()
    kept.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="write each emulated run's report, plots, controller logs and TE decision records here",
    )
    kept.add_argument(
        "--keep-misses",
        type=Path,
        metavar="DIR",
        help="the same, only for runs that miss a per-run target, each in a directory of its own",
    )
    args = parser.parse_args()
    emulate = not args.no_emulation
    if emulate:
        ovs.check_running()
    chosen = [p for p in PATTERNS if not args.pattern or p.name in args.pattern]
    patterns: list[dict[str, Any]] = []
    for pattern in chosen:
        patterns.append(run_pattern(pattern, args.seeds, emulate, args.keep, args.keep_misses))
        result = {
            "benchmark": "hedera",
            "host": platform.node(),
            "seeds": args.seeds,
            "patterns_run": f"{len(patterns)} of {len(chosen)}",  # written after each: a cut run keeps what it ran
            "summary": summary(patterns, emulate),
            "patterns": patterns,
        }
        write_result(args.out, result)
    print(table(patterns, emulate))
    print(result["summary"])
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    main()
