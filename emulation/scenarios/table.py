"""A scenario report as a table for people: ECMP and TE side by side."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from emulation.scenarios.control import control_line
from emulation.scenarios.records import Incast, ModeFigures, PhaseFigures, ScenarioReport


def _figure(value: float | None, fmt: str) -> str:
    """A figure, or '-' where nothing stands behind it (no flow judged)."""
    return "-" if value is None else f"{value:{fmt}}"


def _phase_fraction(k: int) -> Callable[[ModeFigures], str]:
    return lambda m: _figure(m.phases[k].totals.fraction_of_optimum, ".1%")


def _pair(a: float | None, b: float | None, fmt: str) -> str:
    return "-" if a is None else f"{a:{fmt}} / {b:{fmt}}" if b is not None else f"{a:{fmt}} / -"


def _if_te(fmt: Callable[[ModeFigures], str]) -> Callable[[ModeFigures], str]:
    """A row of what TE did: '-' for a run with no TE decision counted."""
    return lambda m: fmt(m) if m.te_decisions else "-"


def _last_move(m: ModeFigures) -> str:
    last = m.te.last_move_s
    return f"{m.te.moves_in_steady_traffic} / " + ("-" if last is None else f"{last:.2f}")


def _host_cpu(m: ModeFigures) -> str:
    cpu = m.host_cpu
    return "-" if cpu is None else f"{cpu.busy:.0%} / {cpu.stolen:.1%}"


Row = tuple[str, Callable[[ModeFigures], str]]  # a label, and how a mode's figures show in it

# Queues, losses and what TE did: rows every report has.
_RUN_ROWS: list[Row] = [
    ("Jain's fairness", lambda m: _figure(m.jain_fairness, ".3f")),
    ("spine-tier utilization (mean peak)", lambda m: f"{m.max_spine_tier_utilization.mean_of_peaks:.2f}"),
    (
        "bottleneck queue p50/p99 (KB, steady)",
        lambda m: f"{m.bottleneck_queue.p50_bytes / 1e3:.0f} / {m.bottleneck_queue.p99_bytes / 1e3:.0f}",
    ),
    ("queue peak, any port, any time (KB)", lambda m: f"{m.bottleneck_queue.peak_bytes_any_port_any_time / 1e3:.0f}"),
    ("drops at queues (packets)", lambda m: f"{m.drops}"),
    ("policed by meters (packets)", lambda m: f"{m.policed}"),
    ("host CPU busy / stolen by the hypervisor", _host_cpu),
    ("reroutes", _if_te(lambda m: f"{m.te_decisions.get('reroute', 0):.0f}")),
    (
        "collision-to-fix median / p99 (s)",
        lambda m: _pair(m.te.collision_to_fix_s.median, m.te.collision_to_fix_s.p99, ".2f"),
    ),
    ("collisions never fixed", _if_te(lambda m: f"{m.te.collision_to_fix_s.unfixed}")),
    ("moves per flow (mean / max)", _if_te(lambda m: f"{m.te.moves_per_flow.mean:.2f} / {m.te.moves_per_flow.max}")),
    ("moves > 2 s after a change / last move (s)", _if_te(_last_move)),
    (
        "path changes per flow (mean / max / max per change)",
        _if_te(
            lambda m: (
                f"{m.te.path_changes_per_flow.mean:.2f} / {m.te.path_changes_per_flow.max}"
                f" / {m.te.path_changes_per_flow_per_change_max}"
            )
        ),
    ),
]

# A scenario with an incast: its converging leaf, its senders, its bystander.
_INCAST_ROWS: list[Row] = [
    (
        "incast: queue p50/p99 into its leaf (KB)",
        lambda m: (
            f"{_incast(m).converging_queue_p50_bytes / 1e3:.0f} / {_incast(m).converging_queue_p99_bytes / 1e3:.0f}"
        ),
    ),
    ("incast: drops into its leaf", lambda m: f"{_incast(m).converging_drops}"),
    ("incast senders: Jain's fairness", lambda m: _figure(_incast(m).senders_jain, ".3f")),
    (
        "bystander: share of its fair rate",
        lambda m: _figure(_incast(m).bystander_share, ".1%"),
    ),
]


def _incast(m: ModeFigures) -> Incast:
    assert m.incast is not None  # its rows are shown only for a scenario with an incast
    return m.incast


def table(report: ScenarioReport) -> str:
    modes = report.modes
    first = next(iter(modes.values()))
    rows = _rows(first)
    lines = _heading(report)
    width = max(len(r[0]) for r in rows)
    lines.append(f"{'':{width}}  " + "  ".join(f"{m.upper():>14}" for m in modes))
    for label, fmt in rows:
        lines.append(f"{label:{width}}  " + "  ".join(f"{fmt(modes[m]):>14}" for m in modes))
    lines += _job_lines(modes)
    if first.flows:
        lines.append("")
        lines.append(
            "per flow (Mb/s): "
            + "; ".join(
                f"{f.flow}: " + " / ".join(f"{modes[m].flows[i].goodput_mbps:.1f}" for m in modes)
                for i, f in enumerate(first.flows)
            )
        )
    if report.ecmp_against_simulator is not None:
        lines += ["", control_line(report.ecmp_against_simulator)]
    return "\n".join(lines)


def _down(phase: PhaseFigures) -> str:
    return f", {', '.join(phase.dead_links)} down" if phase.dead_links else ""


def _rows(first: ModeFigures) -> list[Row]:
    """The table's rows for the report's scenario (`first`: one mode's figures, for its shape)."""
    rows: list[Row] = [
        (
            "aggregate goodput (Mb/s)",
            lambda m: "-" if m.totals.fraction_of_optimum is None else f"{m.totals.aggregate_mbps:.1f}",
        ),
        ("fraction of optimum", lambda m: _figure(m.totals.fraction_of_optimum, ".1%")),
    ]
    if len(first.phases) > 1:
        for k, phase in enumerate(first.phases):
            rows.append((f"  in {phase.from_s:g}-{phase.to_s:g} s{_down(phase)}", _phase_fraction(k)))
    rows.append(
        (
            "fraction of single-path optimum",
            lambda m: _figure(m.totals.fraction_of_single_path, ".1%"),
        )
    )
    rows += _RUN_ROWS
    if first.incast is not None:
        rows += _INCAST_ROWS
    return rows


def _heading(report: ScenarioReport) -> list[str]:
    """What ran, and the optimum each phase is judged against."""
    optimum = report.optimum
    lines = [
        f"{report.scenario} on {report.fabric}, seed {report.seed}; TE's telemetry: "
        f"{report.telemetry}; underlay installed by: {report.underlay}"
    ]
    for phase in optimum.phases:
        down = f" ({', '.join(phase.dead_links)} down)" if phase.dead_links else ""
        if not phase.rates_mbps:  # iterating jobs and bursts only: they are judged by their times
            lines.append(f"optimum {phase.from_s:g}-{phase.to_s:g} s{down}: - (no flow's goodput judged)")
            continue
        single = "unknown" if phase.single_path_mbps is None else f"{phase.single_path_mbps:.1f} Mb/s"
        lines.append(
            f"optimum {phase.from_s:g}-{phase.to_s:g} s{down}: {phase.aggregate_mbps:.1f} Mb/s; "
            f"single-path {single}; solved in {phase.solve_s * 1e3:.0f} ms"
        )
    lines += [
        f"(optimum: {optimum.kind}, exact, failure-aware; a run above it by more than "
        f"{optimum.tolerance:.0%} fails as a bug)",
        "",
    ]
    return lines


def _job_lines(modes: Mapping[str, ModeFigures]) -> list[str]:
    """Per job, per mode: iteration time p50 / p99 / max, the slowdown over
    the optimum's, bus bandwidth; per finite item, its bursts' completion."""
    first = next(iter(modes.values()))
    lines = []
    if first.jobs:
        lines += ["", "iterations: time p50 / p99 / max (s); mean and p99 over the optimum; busbw p50 (GB/s)"]
    for k, job in enumerate(first.jobs):
        head = f"  {job.job} ({job.collective}, {job.gpus} GPUs, optimum {job.optimum_s or 0:.2f} s)"
        lines.append(head)
        for mode, figures in modes.items():
            j = figures.jobs[k]
            t, slow, bus = j.iteration_s, j.slowdown_vs_optimum, j.busbw_gbytes_s
            if not t.n:
                lines.append(f"    {mode.upper():5} no iteration finished ({j.iterations_started} started)")
                continue
            # No live path in any stretch it ran in: no optimum to compare with.
            mean, p99 = (slow.mean, slow.p99) if slow.n else (math.nan, math.nan)
            lines.append(
                f"    {mode.upper():5} {t.p50:.2f} / {t.p99:.2f} / {t.max:.2f}"
                f"   x{mean:.2f} / x{p99:.2f}   {bus.p50:.1f}"
                f"   ({j.iterations_finished}/{j.iterations_started} finished)"
            )
    for k, item in enumerate(first.bursts):
        lines.append(
            f"  traffic[{item.item}] bursts: completion p50 / p99 (s), delivered: "
            + "; ".join(
                f"{mode.upper()} "
                + ("-" if not b.completion_s.n else f"{b.completion_s.p50:.2f} / {b.completion_s.p99:.2f}")
                + f", {b.delivered_share.mean or 0:.1%}"
                for mode, b in ((m, f.bursts[k]) for m, f in modes.items())
            )
        )
    return lines
