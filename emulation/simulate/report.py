"""A simulation result as a table for people. Pure (the files are written by output.py)."""

from __future__ import annotations

from emulation.simulate.records import CycleFigures, SimulationReport
from emulation.simulate.report_iterations import iteration_table
from emulation.simulate.report_lines import header, loop_lines, pct, placement_line

_UNIT = {"Tb/s": 1e12, "Gb/s": 1e9}


def _unit(result: SimulationReport) -> str:
    biggest = max((p.optimum.aggregate_bps for p in result.goodput_phases), default=0.0)
    return "Tb/s" if biggest >= 10e12 else "Gb/s"


def _rate(bps: float | None, unit: str) -> str:
    return "-" if bps is None else f"{bps / _UNIT[unit]:.1f}"


def table(result: SimulationReport) -> str:
    if result.arms is not None:
        return iteration_table(result)
    unit = _unit(result)
    lines = [header(result)]
    if result.placement:
        lines.append(placement_line(result.placement))
    lines += _optimum_lines(result, unit)
    lines.append("")
    lines += _arm_lines(result, unit, bool(result.placement))
    lines.append("")
    lines += _te_lines(result)
    lines += loop_lines(result)
    return "\n".join(lines)


def _optimum_lines(result: SimulationReport, unit: str) -> list[str]:
    """Each phase's optimum, and the bounds it was weighed against."""
    lines = []
    for phase in result.goodput_phases:
        opt = phase.optimum
        extra = [f"single-path {_rate(opt.single_path_bps, unit)}"] if opt.single_path_bps is not None else []
        if opt.throughput_bound_bps is not None:
            extra.append(f"throughput bound {_rate(opt.throughput_bound_bps, unit)}")
        dead = f", links down: {', '.join(phase.dead_links)}" if phase.dead_links else ""
        lines.append(
            f"from {phase.start_s:g} s ({phase.flows} flows{dead}): optimum "
            f"{_rate(opt.aggregate_bps, unit)} {unit} "
            f"(splittable max-min; {'; '.join(extra)}), {opt.method}, {opt.solve_s:.2f} s"
        )
    return lines


def _arm_row(name: str, ecmp: str, spray: str, te_first: str, te_last: str) -> str:
    return f"{name:28s}{ecmp:>10s}{spray:>10s}{te_first:>10s}{te_last:>10s}"


def _arm_lines(result: SimulationReport, unit: str, placed: bool) -> list[str]:
    """ECMP and spraying (static) beside TE's first and last cycle."""
    phases = result.goodput_phases
    first_phase, last_phase = phases[0], phases[-1]
    ecmp, spray = last_phase.ecmp, last_phase.spray
    first: CycleFigures | None = result.cycles[0] if result.cycles else None
    last: CycleFigures | None = result.cycles[-1] if result.cycles else None
    base_note = " (baseline placement)" if placed else ""
    lines = [
        f"{'':28s}{'ECMP':>10s}{'spraying':>10s}{'TE first':>10s}{'TE final':>10s}",
        _arm_row(
            "fraction of optimum",
            pct(ecmp.fraction_of_optimum),
            pct(spray.fraction_of_optimum),
            pct(first.fraction_of_optimum if first else None),
            pct(last.fraction_of_optimum if last else None),
        ),
        _arm_row(
            f"aggregate ({unit})",
            _rate(ecmp.aggregate_bps, unit),
            _rate(spray.aggregate_bps, unit),
            _rate(first.aggregate_bps if first else None, unit),
            _rate(last.aggregate_bps if last else None, unit),
        ),
        _arm_row(
            "collided uplinks",
            str(ecmp.collided_uplinks),
            str(spray.collided_uplinks),
            str(first.collided_uplinks) if first else "-",
            str(last.collided_uplinks) if last else "-",
        ),
    ]
    if len(phases) > 1:
        lines.append(
            f"(ECMP and spraying in the last phase{base_note}; in the first: "
            f"{pct(first_phase.ecmp.fraction_of_optimum)} and "
            f"{pct(first_phase.spray.fraction_of_optimum)})"
        )
    elif base_note:
        lines.append(f"(ECMP and spraying{base_note}; TE on Railyard's placement, each against its own optimum)")
    return lines


def _te_lines(result: SimulationReport) -> list[str]:
    """How soon TE reached its target and held it, and what it cost in moves and mods."""
    goal, loop, cycles = result.te.goal, result.te.loop, result.cycles
    if goal is None:  # judged by time: no goodput target
        return []
    reach = goal.cycles_to_target_and_holds
    reached = (
        f"{goal.target:.0%} of optimum after {reach} TE cycle(s) ({cycles[reach].t:.2f} s) and holds"
        if reach is not None
        else f"{goal.target:.0%} of optimum not held to the end"
        + (f" (first reached after {goal.cycles_to_target} cycles)" if goal.cycles_to_target is not None else "")
    )
    return [
        f"TE: {reached}",
        f"    reroutes {loop.reroutes_total} (at most {loop.reroutes_per_cycle_max} in a cycle), "
        f"{loop.reroutes_steady} in the last {loop.steady_cycles} cycles; flow-mods {loop.flow_mods_total} "
        f"({loop.flow_mods_steady} in the last {loop.steady_cycles}), meter-mods {loop.meter_mods_total}",
        f"    flows moved {loop.flows_moved}, path changes per flow: max {loop.path_changes_per_flow_max} "
        f"({loop.path_changes_per_flow_per_change_max} per change of traffic), "
        f"mean over moved {loop.path_changes_per_moved_flow_mean:.2f}",
    ]
