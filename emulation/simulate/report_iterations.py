"""The table of a run judged by time: iteration times per arm, overall and per job. Pure."""

from __future__ import annotations

from emulation.simulate.report_lines import header, loop_lines, placement_line

SHOWN_JOBS = 40  # a 16K-GPU mix has a few dozen jobs; beyond this the JSON has them


def _s(seconds: float) -> str:
    return f"{seconds:.3f}" if seconds else "-"


def iteration_table(result: dict) -> str:
    arms: dict = result["arms"]
    names = [n for n in arms if n != "optimum"]
    lines = [header(result)]
    if result.get("placement"):
        lines.append(placement_line(result["placement"]))
    if result.get("events"):
        lines.append(
            "events: "
            + ", ".join(f"{k} {v} at {e['at_s']:g} s" for e in result["events"] for k, v in e.items() if k != "at_s")
        )
    optimum = arms["optimum"]
    lines += ["", f"iteration time, s (optimum by {optimum['overall'].get('method') or '-'})"]
    lines.append(f"{'':16s}{'iters':>7s}{'p50':>9s}{'p99':>9s}{'max':>9s}{'slow p50':>10s}{'slow p99':>10s}")
    for name in [*names, "optimum"]:
        o = arms[name]["overall"]
        count = "-" if name == "optimum" else str(o["iterations"])  # the optimum is one bound per job
        lines.append(
            f"{name:16s}{count:>7s}{_s(o['p50_s']):>9s}{_s(o['p99_s']):>9s}{_s(o['max_s']):>9s}"
            f"{o['slowdown_p50']:>10.2f}{o['slowdown_p99']:>10.2f}"
        )
    jobs = list(optimum["jobs"])
    if jobs:
        lines += ["", "per job: p50 / p99 iteration time, s (busbw at p50, Gb/s, for railyard+te)"]
        lines.append(
            f"{'job':10s}{'GPUs':>6s} {'collective':11s}{'optimum':>9s}"
            + "".join(f"{n:>18s}" for n in names)
            + f"{'busbw':>8s}"
        )
        for job in jobs[:SHOWN_JOBS]:
            o = optimum["jobs"][job]
            cells = []
            for name in names:
                row = arms[name]["jobs"].get(job) or {}
                cells.append(
                    f"{_s(row.get('p50_s', 0.0))} / {_s(row.get('p99_s', 0.0))}" if row.get("iterations") else "-"
                )
            te = arms["railyard+te"]["jobs"].get(job, {})
            lines.append(
                f"{job:10s}{o['gpus']:>6d} {o['collective']:11s}{o['p50_s']:>9.3f}"
                + "".join(f"{c:>18s}" for c in cells)
                + f"{te.get('busbw_p50_gbps', 0.0):>8.0f}"
            )
        if len(jobs) > SHOWN_JOBS:
            lines.append(f"... {len(jobs) - SHOWN_JOBS} more jobs in the JSON")
    bursts = {n: arms[n]["bursts"] for n in names if arms[n].get("bursts")}
    for name, b in bursts.items():
        lines.append(
            f"{name}: {b['completed']} bursts completed (p50 {b['p50_s']:.3f} s, p99 {b['p99_s']:.3f} s), "
            f"{b['cut_off']} cut off"
        )
    te = result["te"]
    lines += [
        "",
        f"TE: reroutes {te['reroutes_total']} (at most {te['reroutes_per_cycle_max']} in a cycle), "
        f"flow-mods {te['flow_mods_total']}, meter-mods {te['meter_mods_total']}, flows moved {te['flows_moved']}",
    ]
    lines += loop_lines(result)
    return "\n".join(lines)
