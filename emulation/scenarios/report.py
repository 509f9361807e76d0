"""Scenario reports: figures computed from the two runs (pure), then a table
for people, JSON for machines and PNG plots."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from controller.fabric import Endpoint, Fabric
from emulation.model.optimum import OptimumKind
from emulation.scenarios.judge import (
    OPTIMUM_NOTE,
    TOLERANCE,
    OptimumExceeded,
    Phase,
    check,
    judge,
    phases,
    planned_intervals,
)
from emulation.scenarios.runner import ModeRun
from emulation.scenarios.spec import Scenario, check_events
from emulation.scenarios.timeline import te_figures


def jain(values: list[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes everything."""
    if not values or not any(values):
        return 0.0
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def longest_zero_run_s(intervals: tuple[float, ...], floor_bps: float = 1e5) -> int:
    run = best = 0
    for bps in intervals:
        run = run + 1 if bps < floor_bps else 0
        best = max(best, run)
    return best


def mode_figures(fabric: Fabric, run: ModeRun, phases_: Sequence[Phase], scenario: Scenario) -> dict:
    duration_s = scenario.duration_s
    judged = judge(phases_, run.results, duration_s)
    share = [f["goodput_bps"] / f["optimum_bps"] if f["optimum_bps"] else 0.0 for f in judged["flows"]]
    tier = fabric.spine_tier
    capacity = {e: fabric.link_at(e).emulated_bps for e in tier}
    peaks = [max((s.tx_bps.get(e, 0.0) / capacity[e] for e in tier), default=0.0) for s in run.samples]
    # Queues are judged like goodput: in steady state, from a second after the
    # last flows started (the controller's reaction to them is that second);
    # the peak, transient included, is reported beside.
    steady_from = scenario.incast_start_s + 1.0
    queues: dict[Endpoint, list[int]] = {}
    for s in run.samples:
        if s.t >= steady_from:
            for e, q in s.queue_bytes.items():
                queues.setdefault(e, []).append(q)
    bottleneck = max(queues, key=lambda e: (percentile(queues[e], 0.99), sum(queues[e]))) if queues else None
    backlog = queues[bottleneck] if bottleneck is not None else []
    peak = max((q for s in run.samples for q in s.queue_bytes.values()), default=0)
    # Traffic changes: flows starting, link events, and the end (flows stopping).
    changes = sorted({0.0, duration_s, *(f.start_s for f in run.flows), *(e.at_s for e in scenario.events)})
    te = te_figures(
        fabric, run.decisions, [(s.t, s.tx_bps) for s in run.samples], changes, run.commit_s, len(run.flows)
    )
    return {
        "flows": [
            {
                "flow": r.flow.five_tuple,
                "goodput_mbps": f["goodput_bps"] / 1e6,
                "optimum_mbps": f["optimum_bps"] / 1e6,
                "single_path_optimum_mbps": None if f["single_path_bps"] is None else f["single_path_bps"] / 1e6,
                "min_interval_mbps": min(planned_intervals(r, duration_s), default=0.0) / 1e6,
                "longest_zero_s": longest_zero_run_s(planned_intervals(r, duration_s)),
                "error": r.error,
            }
            for r, f in zip(run.results, judged["flows"])
        ],
        **{k: v for k, v in judged.items() if k != "flows"},
        "jain_fairness": jain(share),
        "max_spine_tier_utilization": {
            "mean_of_peaks": statistics.fmean(peaks) if peaks else 0.0,
            "peak": max(peaks, default=0.0),
        },
        "bottleneck_queue": {
            "port": f"{bottleneck.node}:{bottleneck.port}" if bottleneck else "",
            "p50_bytes": percentile(backlog, 0.5),
            "p99_bytes": percentile(backlog, 0.99),
            "steady_from_s": steady_from,
            "peak_bytes_any_port_any_time": peak,
        },
        "drops": run.drops,
        "policed": run.policed,
        **({"incast": incast_figures(scenario, share)} if scenario.pattern == "incast" else {}),
        "te_decisions": run.te_decisions,
        **te,
        "flow_mods": run.flow_mods,
    }


def incast_figures(scenario: Scenario, share: list[float]) -> dict:
    """The incast scenario's flows are its senders, then the bystander (if any);
    `share` is each flow's goodput over its max-min optimum, its fair share."""
    senders, rest = share[: scenario.fan_in], share[scenario.fan_in :]
    return {
        "senders_jain": jain(senders),
        "senders_min_share": min(senders, default=0.0),
        "bystander_share": rest[0] if rest else None,
    }


def optimum_figures(phases_: Sequence[Phase], duration_s: float) -> dict:
    """The optimum the runs are judged against, phase by phase."""
    return {
        "kind": OptimumKind.SPLITTABLE.value,
        "about": OPTIMUM_NOTE,
        "tolerance": TOLERANCE,
        # Time-weighted over the phases.
        "aggregate_mbps": sum(p.bounds.splittable.aggregate_bps * (p.end_s - p.start_s) for p in phases_)
        / duration_s
        / 1e6,
        "phases": [
            {
                "from_s": p.start_s,
                "to_s": p.end_s,
                "dead_links": list(p.dead_links),
                "aggregate_mbps": p.bounds.splittable.aggregate_bps / 1e6,
                "method": p.bounds.splittable.method,
                "single_path_mbps": None if p.bounds.single_path is None else p.bounds.single_path.aggregate_bps / 1e6,
                "single_path_method": None if p.bounds.single_path is None else p.bounds.single_path.method,
                "throughput_bound_mbps": p.bounds.throughput_bps / 1e6,
                "solve_s": p.bounds.solve_s,
                "rates_mbps": [r / 1e6 for r in p.bounds.splittable.rates_bps],
                "routes": [[[via, bps / 1e6] for via, bps in route] for route in p.bounds.splittable.routes],
                "single_path_vias": None if p.bounds.single_path is None else list(p.bounds.single_path.vias),
            }
            for p in phases_
        ],
    }


def build_report(fabric: Fabric, scenario: Scenario, seed: int, runs: dict[str, ModeRun]) -> dict:
    """Both runs judged against the exact optimum of the scenario's flows
    (identical in both runs), phase by phase around its events. Raises
    OptimumExceeded (with the report attached) when a run beats the bound."""
    scenario = check_events(scenario, fabric.spec)
    # Each run against the optimum of its own flows (the same pairs in both runs
    # by construction; placed jobs could in principle differ).
    by_flows: dict[tuple, list[Phase]] = {}
    for run in runs.values():
        key = tuple((f.src, f.dst, f.protocol, f.rate_bps) for f in run.flows)
        if key not in by_flows:
            by_flows[key] = phases(fabric, scenario, run.flows)
    phase_of = {
        mode: by_flows[tuple((f.src, f.dst, f.protocol, f.rate_bps) for f in run.flows)] for mode, run in runs.items()
    }
    shown = phase_of["te"] if "te" in phase_of else next(iter(phase_of.values()))
    report: dict = {
        "scenario": scenario.name,
        "description": scenario.description,
        "fabric": fabric.spec.name,
        "seed": seed,
        "duration_s": scenario.duration_s,
        "events": [{"at_s": e.at_s, "link_down": e.link, "leaf": e.leaf, "spine": e.spine} for e in scenario.events],
        "optimum": optimum_figures(shown, scenario.duration_s),
        "modes": {mode: mode_figures(fabric, run, phase_of[mode], scenario) for mode, run in runs.items()},
    }
    for mode, figures in report["modes"].items():
        if any(f["error"] for f in figures["flows"]):
            # A flow that did not run (an iperf3 error, reported per flow) leaves
            # its share to the others: the optimum of the flows that were meant
            # to run is no bound on them. The error is the finding.
            figures["optimum_check"] = "skipped: a flow reported an error"
            continue
        figures["optimum_check"] = "passed"
        try:
            check(mode, figures)
        except OptimumExceeded as exc:
            exc.report = report
            raise
    return report


def _phase_fraction(k: int) -> Callable[[dict], str]:
    return lambda m: f"{m['phases'][k]['fraction_of_optimum']:.1%}"


def _pair(a: float | None, b: float | None, fmt: str) -> str:
    return "-" if a is None else f"{a:{fmt}} / {b:{fmt}}" if b is not None else f"{a:{fmt}} / -"


def table(report: dict) -> str:
    modes = report["modes"]
    first = next(iter(modes.values()))
    rows: list[tuple[str, Callable[[dict], str]]] = [
        ("aggregate goodput (Mb/s)", lambda m: f"{m['aggregate_mbps']:.1f}"),
        ("fraction of optimum", lambda m: f"{m['fraction_of_optimum']:.1%}"),
    ]
    if len(first["phases"]) > 1:
        for k, phase in enumerate(first["phases"]):
            down = f", {', '.join(phase['dead_links'])} down" if phase["dead_links"] else ""
            rows.append((f"  in {phase['from_s']:g}-{phase['to_s']:g} s{down}", _phase_fraction(k)))
    rows.append(
        (
            "fraction of single-path optimum",
            lambda m: "-" if m["fraction_of_single_path"] is None else f"{m['fraction_of_single_path']:.1%}",
        )
    )
    rows += [
        ("Jain's fairness", lambda m: f"{m['jain_fairness']:.3f}"),
        ("spine-tier utilization (mean peak)", lambda m: f"{m['max_spine_tier_utilization']['mean_of_peaks']:.2f}"),
        (
            "bottleneck queue p50/p99 (KB, steady)",
            lambda m: (
                f"{m['bottleneck_queue']['p50_bytes'] / 1e3:.0f} / {m['bottleneck_queue']['p99_bytes'] / 1e3:.0f}"
            ),
        ),
        (
            "queue peak, any port, any time (KB)",
            lambda m: f"{m['bottleneck_queue']['peak_bytes_any_port_any_time'] / 1e3:.0f}",
        ),
        ("drops at queues (packets)", lambda m: f"{m['drops']}"),
        ("policed by meters (packets)", lambda m: f"{m['policed']}"),
        ("reroutes", lambda m: f"{m['te_decisions'].get('reroute', 0):.0f}" if m["te_decisions"] else "-"),
        (
            "collision-to-fix median / p99 (s)",
            lambda m: _pair(m["collision_to_fix_s"]["median"], m["collision_to_fix_s"]["p99"], ".2f"),
        ),
        ("collisions never fixed", lambda m: f"{m['collision_to_fix_s']['unfixed']}" if m["te_decisions"] else "-"),
        (
            "moves per flow (mean / max)",
            lambda m: f"{m['moves_per_flow']['mean']:.2f} / {m['moves_per_flow']['max']}" if m["te_decisions"] else "-",
        ),
        (
            "moves > 2 s after a change / last move (s)",
            lambda m: (
                f"{m['moves_in_steady_traffic']} / " + ("-" if m["last_move_s"] is None else f"{m['last_move_s']:.2f}")
                if m["te_decisions"]
                else "-"
            ),
        ),
        (
            "path changes per flow (mean / max)",
            lambda m: (
                f"{m['path_changes_per_flow']['mean']:.2f} / {m['path_changes_per_flow']['max']}"
                if m["te_decisions"]
                else "-"
            ),
        ),
    ]
    if "incast" in first:
        rows += [
            ("incast senders: Jain's fairness", lambda m: f"{m['incast']['senders_jain']:.3f}"),
            (
                "bystander: share of its fair rate",
                lambda m: "-" if m["incast"]["bystander_share"] is None else f"{m['incast']['bystander_share']:.1%}",
            ),
        ]
    optimum = report["optimum"]
    lines = [f"{report['scenario']} on {report['fabric']}, seed {report['seed']}"]
    for phase in optimum["phases"]:
        down = f" ({', '.join(phase['dead_links'])} down)" if phase["dead_links"] else ""
        single = "unknown" if phase["single_path_mbps"] is None else f"{phase['single_path_mbps']:.1f} Mb/s"
        lines.append(
            f"optimum {phase['from_s']:g}-{phase['to_s']:g} s{down}: {phase['aggregate_mbps']:.1f} Mb/s; "
            f"single-path {single}; solved in {phase['solve_s'] * 1e3:.0f} ms"
        )
    lines += [
        f"(optimum: {optimum['kind']}, exact, failure-aware; a run above it by more than "
        f"{optimum['tolerance']:.0%} fails as a bug)",
        "",
    ]
    width = max(len(r[0]) for r in rows)
    lines.append(f"{'':{width}}  " + "  ".join(f"{m.upper():>14}" for m in modes))
    for label, fmt in rows:
        lines.append(f"{label:{width}}  " + "  ".join(f"{fmt(modes[m]):>14}" for m in modes))
    lines.append("")
    lines.append(
        "per flow (Mb/s): "
        + "; ".join(
            f"{f['flow']}: " + " / ".join(f"{modes[m]['flows'][i]['goodput_mbps']:.1f}" for m in modes)
            for i, f in enumerate(first["flows"])
        )
    )
    return "\n".join(lines)


def report_stem(scenario: str, fabric: str, seed: int) -> str:
    """The files' common name: names come from YAML files, so anything but
    letters, digits, '.', '_' and '-' becomes '_' and no name climbs out of
    the output directory ('../../x' is written as '_.._x' inside it)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{scenario}-{fabric}-seed{seed}").lstrip(".") or "scenario"


def write(report: dict, runs: dict[str, ModeRun], fabric: Fabric, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = report_stem(report["scenario"], report["fabric"], report["seed"])
    path = out_dir / f"{stem}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    _plots(report, runs, fabric, out_dir / f"{stem}.png")
    for mode, run in runs.items():
        if run.controller_log:
            (out_dir / f"{stem}-{mode}-controller.log").write_text(run.controller_log)
    return path


def _plots(report: dict, runs: dict[str, ModeRun], fabric: Fabric, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(runs)
    fig, axes = plt.subplots(1 + 2 * len(modes), 1, figsize=(10, 3 + 2.6 * 2 * len(modes)))
    flows = report["modes"][modes[0]]["flows"]
    x = range(len(flows))
    width = 0.8 / len(modes)
    for i, mode in enumerate(modes):
        axes[0].bar(
            [j + i * width for j in x],
            [f["goodput_mbps"] for f in report["modes"][mode]["flows"]],
            width,
            label=mode.upper(),
        )
    axes[0].plot(
        [j + 0.4 - width / 2 for j in x], [f["optimum_mbps"] for f in flows], "k_", markersize=18, label="optimum"
    )
    axes[0].set_xticks(
        [j + 0.4 - width / 2 for j in x], [f["flow"].replace(" -> ", "\n-> ") for f in flows], fontsize=6
    )
    axes[0].set_title(f"{report['scenario']}: per-flow goodput (seed {report['seed']})")
    axes[0].set_ylabel("Mb/s")
    axes[0].legend()
    uplinks = [e for egresses in fabric.pod_uplinks.values() for e in egresses]
    for i, mode in enumerate(modes):
        samples = runs[mode].samples
        ax = axes[1 + i]
        for e in uplinks:
            ax.plot(
                [s.t for s in samples],
                [s.tx_bps.get(e, 0.0) / fabric.link_at(e).emulated_bps for s in samples],
                label=f"{e.node}:{e.port}",
            )
        ax.set_title(f"{mode.upper()}: leaf uplink utilization")
        ax.set_ylim(0, 1.15)
        ax.legend(fontsize=6, ncol=4)
        bottleneck = report["modes"][mode]["bottleneck_queue"]["port"]
        axq = axes[1 + len(modes) + i]
        if bottleneck:
            node, port = bottleneck.rsplit(":", 1)
            e = Endpoint(node, int(port))
            axq.plot([s.t for s in samples], [s.queue_bytes.get(e, 0) / 1e3 for s in samples])
        axq.set_title(f"{mode.upper()}: queue at {bottleneck or '-'} (KB)")
        axq.set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
