"""Cross-validation: the flow-level simulator against the emulated fabric,
same spec, same scenario, same seeds.

make bench-crossval  ->  bench/results/crossval.json
(python -m bench.crossval --spec default.yaml --spec three-pod.yaml
 --scenario elephant --scenario link-failure --seeds 1 2 3 4 5)

Both run the same scenario file, expanded by the same code
(emulation.workload.expand: the seed draws the source ports), so both hash
the same 5-tuples;
the simulator's ECMP reproduces OVS's select-group hash, so every flow starts
on the same spine in both. What is compared is each mode's aggregate as a
fraction of the optimum (the same failure-aware max-min LP on both sides),
time-weighted over the run: the emulated goodput over the planned duration,
the simulated rates over the TE cycles (ECMP: over its phases). A training
mix (jobs that iterate, with on/off background and a failure) is compared
by its jobs' iterations instead: the optimum over the p50 iteration time,
TE and E-ECMP (each QP hashed). A case passes when the two are within
`--tolerance` points.

(python -m bench.crossval --scenario training-planes --seeds 1 2 3: a
scenario on its own spec)
"""

from __future__ import annotations

import argparse
import bisect
import platform
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench import write_result
from controller.fabric import load_fabric
from controller.te.engine import DecisionKind
from emulation.model.stats import percentile
from emulation.net import ovs
from emulation.scenarios import output
from emulation.scenarios.records import ScenarioReport
from emulation.scenarios.report import build_report
from emulation.scenarios.runner import AGENT_AND_FABRIC, ScenarioMode, Sources, run_scenario
from emulation.scenarios.timeline import MOVES, Decided
from emulation.simulate.arms import RAILYARD_ECMP, RAILYARD_TE
from emulation.simulate.records import PhaseFigures, SimulationReport
from emulation.simulate.replay import Rerouted, RoutingWorth, routing_worth
from emulation.simulate.run import simulate
from emulation.workload import Workload, load_workload, spec_file
from emulation.workload.model import PatternItem, Telemetry, WorkloadError
from emulation.workload.parse import parse_telemetry

TOLERANCE_POINTS = 5.0


def simulated_workload(scenario: Workload, telemetry: Telemetry) -> Workload:
    """The scenario the simulator runs: the same file (one format drives both),
    with the simulated agent's settings. Cross-validated: one permutation
    (by goodput), or a training mix (by its jobs' iterations)."""
    kinds = [item.kind if isinstance(item, PatternItem) else type(item).__name__ for item in scenario.traffic]
    if kinds != ["permutation"] and not iterating(scenario):
        raise ValueError(
            f"scenario {scenario.name}: traffic {kinds}; cross-validated: one permutation, or jobs with iterations"
        )
    return replace(scenario, telemetry=telemetry)


def iterating(scenario: Workload) -> bool:
    """A training mix: jobs that iterate, judged by their iteration times."""
    return any(job.iterations for job in scenario.jobs())


def iteration_fractions(
    simulated: SimulationReport, emulated: ScenarioReport
) -> tuple[dict[str, float], dict[str, float]]:
    """(simulated, emulated): per mode, the jobs' own optimum over their
    iteration time at p50, every job's iterations pooled (a p50 slowdown of
    1.25 is 80%). ECMP is E-ECMP: each QP hashed, on the same servers."""
    arms = simulated.arms or {}
    sim = {"ecmp": arms[RAILYARD_ECMP].overall.slowdown_p50, "te": arms[RAILYARD_TE].overall.slowdown_p50}
    emu = {}
    for mode in ("ecmp", "te"):
        emu[mode] = percentile([x for job in emulated.modes[mode].jobs for x in job.slowdowns], 0.5)
    return {m: _ratio(1.0, x) for m, x in sim.items()}, {m: _ratio(1.0, x) for m, x in emu.items()}


JUDGED_FROM_S = 1.0  # the emulated report judges a TCP flow from its second second on (slow start)


def emulated_report(workload: Workload, seed: int, sources: Sources = AGENT_AND_FABRIC) -> ScenarioReport:
    """The scenario emulated on its own spec, ECMP and TE, and its report."""
    return emulated_run(workload, seed, sources=sources).report


@dataclass(frozen=True)
class Emulated:
    """An emulated run's report, and what TE's routing in it was worth in
    the fluid model (emulation/simulate/replay.py; None where the replay
    cannot value it)."""

    report: ScenarioReport
    te_routing: RoutingWorth | None
    changes: tuple[Rerouted, ...] = ()  # TE's path changes in the run, from its decision records


def emulated_run(
    workload: Workload, seed: int, keep: Path | None = None, sources: Sources = AGENT_AND_FABRIC
) -> Emulated:
    """The scenario emulated on its own spec, ECMP and TE: its report, and
    TE's routing valued over the window the report judges. `keep`: a
    directory the run's report, plots, controller logs and TE decision
    records are written to, as `railyard scenario run --out` writes them."""
    spec_path = spec_file(workload)
    fabric = load_fabric(spec_path)
    runs = run_scenario(fabric, spec_path, workload, seed, sources=sources)
    changes = rerouted(runs[ScenarioMode.TE].decisions)
    worth = routing_worth(fabric, workload, seed, changes, JUDGED_FROM_S, workload.duration_s)
    report = build_report(fabric, workload, seed, runs, sources)
    if keep is not None:
        output.write(report, runs, fabric, keep)
    return Emulated(report, worth, tuple(changes))


def rerouted(decisions: Sequence[Decided]) -> list[Rerouted]:
    """A run's path changes, from its TE decision records: a move or a
    revert to its new path, a flow let go back to the hash."""
    out = []
    for decided in decisions:
        flow, kind = decided.decision.flow, decided.kind
        if flow is not None and (kind in MOVES or kind is DecisionKind.EXPIRE):
            out.append(Rerouted(decided.at_s, flow, (decided.decision.to_via or "") if kind in MOVES else ""))
    return out


def simulated_fractions(result: SimulationReport, judged_from_s: float = JUDGED_FROM_S) -> dict[str, float]:
    """Over the window the emulated report judges (from `judged_from_s`):
    ECMP time-weighted over its phases, TE averaged over its (evenly
    spaced) cycles; each as credited (`fraction_of_optimum`) and as the
    aggregate's ratio to the optimum's aggregate (`*_aggregate`)."""
    phases, te_optimum = result.goodput_phases, result.te_optimum or []
    ends = [p.start_s for p in phases[1:]] + [result.duration_s]
    spans = [(p, max(end - max(p.start_s, judged_from_s), 0.0)) for p, end in zip(phases, ends)]
    total = sum(span for _, span in spans)

    def ecmp(ratio: Callable[[PhaseFigures], float]) -> float:
        return sum(ratio(p) * span for p, span in spans) / total

    cycles = [c for c in result.cycles if c.t > judged_from_s]
    starts = [o.start_s for o in te_optimum]
    optimum = [te_optimum[bisect.bisect_right(starts, c.t + 1e-9) - 1].optimum.aggregate_bps for c in cycles]
    return {
        "ecmp": ecmp(lambda p: p.ecmp.fraction_of_optimum),
        "te": statistics.fmean(c.fraction_of_optimum or 0.0 for c in cycles),
        "ecmp_aggregate": ecmp(lambda p: _ratio(p.ecmp.aggregate_bps, p.optimum.aggregate_bps)),
        "te_aggregate": statistics.fmean(_ratio(c.aggregate_bps, o) for c, o in zip(cycles, optimum)),
    }


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--spec",
        action="append",
        help="repeatable; default: default.yaml and three-pod.yaml, or with --scenario each scenario's own",
    )
    parser.add_argument("--scenario", action="append", help="repeatable; default: elephant and link-failure")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    # As the emulated agent reports (emulation/agent DEFAULT_INTERVAL_S): a TE cycle per batch.
    parser.add_argument("--interval", type=float, default=0.1, help="simulated telemetry interval, s")
    parser.add_argument("--noise", type=float, default=0.1, help="simulated telemetry noise, +-fraction")
    parser.add_argument("--latency", type=float, default=0.05, help="simulated decision-to-switch latency, s")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE_POINTS, help="points")
    parser.add_argument("--out", default="bench/results/crossval.json")
    args = parser.parse_args()
    try:
        telemetry = parse_telemetry({"interval_s": args.interval, "noise": args.noise, "latency_s": args.latency})
    except WorkloadError as exc:
        parser.error(str(exc))
    ovs.check_running()
    cases: list[dict[str, Any]] = []
    for spec_name in args.spec or ([None] if args.scenario else ["default.yaml", "three-pod.yaml"]):
        for name in args.scenario or ["elephant", "link-failure"]:
            scenario = load_workload(name)
            spec_path = spec_file(scenario, spec_name)
            fabric = load_fabric(spec_path)
            workload = simulated_workload(scenario, telemetry)
            for seed in args.seeds:
                report = build_report(fabric, scenario, seed, run_scenario(fabric, spec_path, scenario, seed))
                flow_errors = report.failed_flows
                if iterating(scenario):
                    simulated, emulated = iteration_fractions(simulate(fabric, workload, seed), report)
                else:
                    emulated = {mode: report.modes[mode].totals.judged_fraction() for mode in ("ecmp", "te")}
                    simulated = simulated_fractions(simulate(fabric, workload, seed))
                diff = {mode: 100 * (simulated[mode] - emulated[mode]) for mode in ("ecmp", "te")}
                case = {
                    "spec": fabric.spec.name,
                    "scenario": name,
                    "seed": seed,
                    "emulated": emulated,
                    "simulated": simulated,
                    "difference_points": diff,
                    "emulated_flow_errors": flow_errors,
                    "within_tolerance": all(abs(d) <= args.tolerance for d in diff.values()),
                }
                cases.append(case)
                print(
                    f"{fabric.spec.name:12} {name:13} seed {seed}:"
                    f" ECMP emulated {emulated['ecmp']:.1%} simulated {simulated['ecmp']:.1%} ({diff['ecmp']:+.1f});"
                    f" TE emulated {emulated['te']:.1%} simulated {simulated['te']:.1%} ({diff['te']:+.1f})"
                    + (f"; {flow_errors} emulated flow(s) failed to report" if flow_errors else ""),
                    flush=True,
                )
    summary = {
        mode: {
            "max_abs_difference_points": max(abs(c["difference_points"][mode]) for c in cases),
            "mean_difference_points": statistics.fmean(c["difference_points"][mode] for c in cases),
        }
        for mode in ("ecmp", "te")
    }
    result = {
        "benchmark": "crossval",
        "host": platform.node(),
        "tolerance_points": args.tolerance,
        "simulated_telemetry": asdict(telemetry),
        "summary": summary,
        "cases_within_tolerance": sum(c["within_tolerance"] for c in cases),
        "cases": cases,
    }
    out = write_result(args.out, result)
    print(f"{result['cases_within_tolerance']}/{len(cases)} cases within {args.tolerance} points; {summary}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
