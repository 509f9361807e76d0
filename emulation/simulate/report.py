"""A simulation result as a table for people. Pure (the files are written by output.py)."""

from __future__ import annotations


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


_UNIT = {"Tb/s": 1e12, "Gb/s": 1e9}


def _unit(result: dict) -> str:
    biggest = max((p["optimum"]["aggregate_bps"] for p in result["phases"]), default=0.0)
    return "Tb/s" if biggest >= 10e12 else "Gb/s"


def _rate(bps: float | None, unit: str) -> str:
    return "-" if bps is None else f"{bps / _UNIT[unit]:.1f}"


def _ms(s: float) -> str:
    return f"{s * 1e3:.0f} ms" if s >= 0.01 else f"{s * 1e3:.1f} ms"


def table(result: dict) -> str:
    unit = _unit(result)

    def rate(bps: float | None) -> str:
        return _rate(bps, unit)

    te = result["te"]
    cycles = result["cycles"]
    lines = [
        f"{result['workload']} on {result['fabric']} ({result['gpus']} GPUs, {result['flows']} flows), "
        f"seed {result['seed']}, {te['simulated_s']:g} s simulated; telemetry every "
        f"{result['telemetry']['interval_s']:g} s, noise ±{result['telemetry']['noise']:.0%}, "
        f"control latency {result['telemetry']['latency_s']:g} s",
    ]
    placement = result.get("placement") or {}
    if placement:
        b, r = placement["baseline"], placement["railyard"]
        lines.append(
            f"jobs: baseline (first-fit, hashed) {b['fill']:.1%} of GPUs, {b['refused_jobs']} refused; "
            f"Railyard placement {r['fill']:.1%} ({r['jobs']} jobs, {r['steered_flows']} of {r['flows']} flows "
            f"steered, {r['placement_flow_mods']} flow-mods), {r['refused_jobs']} refused"
        )
    for phase in result["phases"]:
        opt = phase["optimum"]
        extra = [f"single-path {rate(opt['single_path_bps'])}"] if opt.get("single_path_bps") is not None else []
        if opt.get("throughput_bound_bps") is not None:
            extra.append(f"throughput bound {rate(opt['throughput_bound_bps'])}")
        dead = f", links down: {', '.join(phase['dead_links'])}" if phase["dead_links"] else ""
        lines.append(
            f"from {phase['start_s']:g} s ({phase['flows']} flows{dead}): optimum {rate(opt['aggregate_bps'])} {unit} "
            f"(splittable max-min; {'; '.join(extra)}), {opt['method']}, {opt['solve_s']:.2f} s"
        )
    lines.append("")
    header = f"{'':28s}{'ECMP':>10s}{'spraying':>10s}{'TE first':>10s}{'TE final':>10s}"
    lines.append(header)
    first_phase, last_phase = result["phases"][0], result["phases"][-1]
    first, last = (cycles[0], cycles[-1]) if cycles else ({}, {})
    base_note = " (baseline placement)" if placement else ""

    def row(name: str, ecmp: str, spray: str, te_first: str, te_last: str) -> str:
        return f"{name:28s}{ecmp:>10s}{spray:>10s}{te_first:>10s}{te_last:>10s}"

    lines.append(
        row(
            "fraction of optimum",
            _pct(last_phase["ecmp"]["fraction_of_optimum"]),
            _pct(last_phase["spray"]["fraction_of_optimum"]),
            _pct(first.get("fraction_of_optimum")),
            _pct(last.get("fraction_of_optimum")),
        )
    )
    lines.append(
        row(
            f"aggregate ({unit})",
            rate(last_phase["ecmp"]["aggregate_bps"]),
            rate(last_phase["spray"]["aggregate_bps"]),
            rate(first.get("aggregate_bps")),
            rate(last.get("aggregate_bps")),
        )
    )
    lines.append(
        row(
            "collided uplinks",
            str(last_phase["ecmp"]["collided_uplinks"]),
            str(last_phase["spray"]["collided_uplinks"]),
            str(first.get("collided_uplinks", "-")),
            str(last.get("collided_uplinks", "-")),
        )
    )
    if len(result["phases"]) > 1:
        lines.append(
            f"(ECMP and spraying in the last phase{base_note}; in the first: "
            f"{_pct(first_phase['ecmp']['fraction_of_optimum'])} and "
            f"{_pct(first_phase['spray']['fraction_of_optimum'])})"
        )
    elif base_note:
        lines.append(f"(ECMP and spraying{base_note}; TE on Railyard's placement, each against its own optimum)")
    lines.append("")
    reach = te["cycles_to_target_and_holds"]
    reached = (
        f"{te['target']:.0%} of optimum after {reach} TE cycle(s) ({cycles[reach]['t']:.2f} s) and holds"
        if reach is not None
        else f"{te['target']:.0%} of optimum not held to the end"
        + (f" (first reached after {te['cycles_to_target']} cycles)" if te["cycles_to_target"] is not None else "")
    )
    lines.append(f"TE: {reached}")
    lines.append(
        f"    reroutes {te['reroutes_total']} (at most {te['reroutes_per_cycle_max']} in a cycle), "
        f"{te['reroutes_steady']} in the last {te['steady_cycles']} cycles; flow-mods {te['flow_mods_total']} "
        f"({te['flow_mods_steady']} in the last {te['steady_cycles']}), meter-mods {te['meter_mods_total']}"
    )
    lines.append(
        f"    flows moved {te['flows_moved']}, path changes per flow: max {te['path_changes_per_flow_max']}, "
        f"mean over moved {te['path_changes_per_moved_flow_mean']:.2f}"
    )
    step = te["engine_step_s"]
    split = te["time_split_s"]
    lines.append(
        f"engine step: p50 {_ms(step['p50'])}, p99 {_ms(step['p99'])}, max {_ms(step['max'])}; "
        f"loop time: engine {split['engine']:.2f} s, telemetry {split['telemetry']:.2f} s, "
        f"fluid model {split['fluid_model']:.2f} s, overlay {split['overlay']:.2f} s"
    )
    setup = result["setup_s"]
    lines.append(
        f"speed: {te['sim_s_per_wall_s']:.2f} simulated s per wall s over the loop; setup: flows "
        f"{setup.get('flows_s', 0):.2f} s, routes {setup.get('routes_s', 0):.2f} s, optimum "
        f"{setup.get('optimum_s', 0):.2f} s, baselines {setup.get('baselines_s', 0):.2f} s"
    )
    return "\n".join(lines)
