"""The table of a run judged by time: iteration times per arm, overall and per job. Pure."""

from __future__ import annotations

from emulation.simulate.arms import OPTIMUM, RAILYARD_TE
from emulation.simulate.records import ArmFigures, SimulationReport
from emulation.simulate.report_lines import header, loop_lines, placement_line

SHOWN_JOBS = 40  # a 16K-GPU mix has a few dozen jobs; beyond this the JSON has them


def _s(seconds: float | None) -> str:
    return f"{seconds:.3f}" if seconds else "-"


def iteration_table(result: SimulationReport) -> str:
    arms = result.arms or {}
    names = [n for n in arms if n != OPTIMUM]
    lines = [header(result)]
    if result.placement:
        lines.append(placement_line(result.placement))
    if result.events:
        lines.append(
            "events: "
            + ", ".join(f"{k} {v} at {e['at_s']:g} s" for e in result.events for k, v in e.items() if k != "at_s")
        )
    optimum = arms[OPTIMUM]
    lines += ["", f"iteration time, s (optimum by {optimum.overall.method or '-'})"]
    lines.append(f"{'':16s}{'iters':>7s}{'p50':>9s}{'p99':>9s}{'max':>9s}{'slow p50':>10s}{'slow p99':>10s}")
    for name in [*names, OPTIMUM]:
        o = arms[name].overall
        count = "-" if name == OPTIMUM else str(o.iterations)  # the optimum is one bound per job
        lines.append(
            f"{name:16s}{count:>7s}{_s(o.p50_s):>9s}{_s(o.p99_s):>9s}{_s(o.max_s):>9s}"
            f"{o.slowdown_p50:>10.2f}{o.slowdown_p99:>10.2f}"
        )
    lines += _job_lines(arms, names)
    for name in names:
        b = arms[name].bursts
        if b:
            lines.append(
                f"{name}: {b.completed} bursts completed (p50 {b.p50_s:.3f} s, p99 {b.p99_s:.3f} s), "
                f"{b.cut_off} cut off"
            )
    loop = result.te.loop
    lines += [
        "",
        f"TE: reroutes {loop.reroutes_total} (at most {loop.reroutes_per_cycle_max} in a cycle), "
        f"flow-mods {loop.flow_mods_total}, meter-mods {loop.meter_mods_total}, flows moved {loop.flows_moved}",
    ]
    lines += loop_lines(result)
    return "\n".join(lines)


def _job_lines(arms: dict[str, ArmFigures], names: list[str]) -> list[str]:
    """Per job: its optimum, each arm's p50 / p99, and TE's busbw."""
    optimum = arms[OPTIMUM].jobs
    if not optimum:
        return []
    lines = ["", "per job: p50 / p99 iteration time, s (busbw at p50, Gb/s, for railyard+te)"]
    lines.append(
        f"{'job':10s}{'GPUs':>6s} {'collective':11s}{'optimum':>9s}"
        + "".join(f"{n:>18s}" for n in names)
        + f"{'busbw':>8s}"
    )
    jobs = list(optimum)
    for job in jobs[:SHOWN_JOBS]:
        o = optimum[job]
        cells = []
        for name in names:
            row = arms[name].jobs.get(job)
            cells.append(f"{_s(row.p50_s)} / {_s(row.p99_s)}" if row and row.iterations else "-")
        te = arms[RAILYARD_TE].jobs.get(job)
        lines.append(
            f"{job:10s}{o.gpus or 0:>6d} {o.collective or '':11s}{o.p50_s:>9.3f}"
            + "".join(f"{c:>18s}" for c in cells)
            + f"{(te.busbw_p50_gbps if te else None) or 0.0:>8.0f}"
        )
    if len(jobs) > SHOWN_JOBS:
        lines.append(f"... {len(jobs) - SHOWN_JOBS} more jobs in the JSON")
    return lines
