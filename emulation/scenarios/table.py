"""A scenario report as a table for people: ECMP and TE side by side."""

from __future__ import annotations

import math
from collections.abc import Callable


def _phase_fraction(k: int) -> Callable[[dict], str]:
    return lambda m: f"{m['phases'][k]['fraction_of_optimum']:.1%}"


def _pair(a: float | None, b: float | None, fmt: str) -> str:
    return "-" if a is None else f"{a:{fmt}} / {b:{fmt}}" if b is not None else f"{a:{fmt}} / -"


Row = tuple[str, Callable[[dict], str]]  # a label, and how a mode's figures show in it

# Queues, losses and what TE did: rows every report has.
_RUN_ROWS: list[Row] = [
    ("Jain's fairness", lambda m: f"{m['jain_fairness']:.3f}"),
    ("spine-tier utilization (mean peak)", lambda m: f"{m['max_spine_tier_utilization']['mean_of_peaks']:.2f}"),
    (
        "bottleneck queue p50/p99 (KB, steady)",
        lambda m: f"{m['bottleneck_queue']['p50_bytes'] / 1e3:.0f} / {m['bottleneck_queue']['p99_bytes'] / 1e3:.0f}",
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
        "path changes per flow (mean / max / max per change)",
        lambda m: (
            f"{m['path_changes_per_flow']['mean']:.2f} / {m['path_changes_per_flow']['max']}"
            f" / {m['path_changes_per_flow_per_change_max']}"
            if m["te_decisions"]
            else "-"
        ),
    ),
]

# A scenario with an incast: its converging leaf, its senders, its bystander.
_INCAST_ROWS: list[Row] = [
    (
        "incast: queue p50/p99 into its leaf (KB)",
        lambda m: (
            f"{m['incast']['converging_queue_p50_bytes'] / 1e3:.0f} / "
            f"{m['incast']['converging_queue_p99_bytes'] / 1e3:.0f}"
        ),
    ),
    ("incast: drops into its leaf", lambda m: f"{m['incast']['converging_drops']}"),
    ("incast senders: Jain's fairness", lambda m: f"{m['incast']['senders_jain']:.3f}"),
    (
        "bystander: share of its fair rate",
        lambda m: "-" if m["incast"]["bystander_share"] is None else f"{m['incast']['bystander_share']:.1%}",
    ),
]


def table(report: dict) -> str:
    modes = report["modes"]
    first = next(iter(modes.values()))
    rows = _rows(first)
    lines = _heading(report)
    width = max(len(r[0]) for r in rows)
    lines.append(f"{'':{width}}  " + "  ".join(f"{m.upper():>14}" for m in modes))
    for label, fmt in rows:
        lines.append(f"{label:{width}}  " + "  ".join(f"{fmt(modes[m]):>14}" for m in modes))
    lines += _job_lines(modes)
    if first["flows"]:
        lines.append("")
        lines.append(
            "per flow (Mb/s): "
            + "; ".join(
                f"{f['flow']}: " + " / ".join(f"{modes[m]['flows'][i]['goodput_mbps']:.1f}" for m in modes)
                for i, f in enumerate(first["flows"])
            )
        )
    return "\n".join(lines)


def _rows(first: dict) -> list[Row]:
    """The table's rows for the report's scenario (`first`: one mode's figures, for its shape)."""
    rows: list[Row] = [
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
    rows += _RUN_ROWS
    if "incast" in first:
        rows += _INCAST_ROWS
    return rows


def _heading(report: dict) -> list[str]:
    """What ran, and the optimum each phase is judged against."""
    optimum = report["optimum"]
    lines = [
        f"{report['scenario']} on {report['fabric']}, seed {report['seed']}; TE's telemetry: "
        f"{report.get('telemetry', 'agent')}; underlay installed by: {report.get('underlay', 'fabric')}"
    ]
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
    return lines


def _job_lines(modes: dict) -> list[str]:
    """Per job, per mode: iteration time p50 / p99 / max, the slowdown over
    the optimum's, bus bandwidth; per finite item, its bursts' completion."""
    first = next(iter(modes.values()))
    lines = []
    if first["jobs"]:
        lines += ["", "iterations: time p50 / p99 / max (s); mean and p99 over the optimum; busbw p50 (GB/s)"]
    for k, job in enumerate(first["jobs"]):
        optimum = min((o["seconds"] for o in job["optimum_iteration_s"] if o["seconds"]), default=None)
        head = f"  {job['job']} ({job['collective']}, {job['gpus']} GPUs, optimum {optimum or 0:.2f} s)"
        lines.append(head)
        for mode, figures in modes.items():
            j = figures["jobs"][k]
            t, slow, bus = j["iteration_s"], j["slowdown_vs_optimum"], j["busbw_gbytes_s"]
            if not t["n"]:
                lines.append(f"    {mode.upper():5} no iteration finished ({j['iterations_started']} started)")
                continue
            if not slow["n"]:  # no live path in any stretch it ran in: no optimum to compare with
                slow = {"mean": math.nan, "p99": math.nan}
            lines.append(
                f"    {mode.upper():5} {t['p50']:.2f} / {t['p99']:.2f} / {t['max']:.2f}"
                f"   x{slow['mean']:.2f} / x{slow['p99']:.2f}   {bus['p50']:.1f}"
                f"   ({j['iterations_finished']}/{j['iterations_started']} finished)"
            )
    for k, item in enumerate(first["bursts"]):
        lines.append(
            f"  traffic[{item['item']}] bursts: completion p50 / p99 (s), delivered: "
            + "; ".join(
                f"{mode.upper()} "
                + (
                    "-"
                    if not b["completion_s"]["n"]
                    else f"{b['completion_s']['p50']:.2f} / {b['completion_s']['p99']:.2f}"
                )
                + f", {b['delivered_share']['mean'] or 0:.1%}"
                for mode, b in ((m, f["bursts"][k]) for m, f in modes.items())
            )
        )
    return lines
