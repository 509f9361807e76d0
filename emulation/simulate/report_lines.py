"""Lines both result tables share. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from emulation.simulate.records import PlacementFigures, SimulationReport


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def ms(s: float) -> str:
    return f"{s * 1e3:.0f} ms" if s >= 0.01 else f"{s * 1e3:.1f} ms"


def placement_line(placement: Mapping[str, PlacementFigures]) -> str:
    b, r = placement["first-fit"], placement["railyard"]
    t = placement.get("topology")
    topology = f"topology packing {t.fill:.1%}, {t.refused_jobs} refused; " if t else ""
    return (
        f"jobs: first-fit (hashed) {b.fill:.1%} of GPUs, {b.refused_jobs} refused; {topology}"
        f"Railyard placement {r.fill:.1%} ({r.jobs} jobs, {r.steered_flows} of {r.flows} flows "
        f"steered, {r.placement_flow_mods} flow-mods), {r.refused_jobs} refused"
    )


def header(result: SimulationReport) -> str:
    telemetry = result.telemetry
    return (
        f"{result.workload} on {result.fabric} ({result.gpus} GPUs, {result.flows} flows), "
        f"seed {result.seed}, {result.te.loop.simulated_s:g} s simulated; telemetry every "
        f"{telemetry.interval_s:g} s, noise ±{telemetry.noise:.0%}, "
        f"control latency {telemetry.latency_s:g} s; links shared {result.sharing} fair"
        + ("" if result.framed else ", delivered bytes only (no frame headers or ACKs)")
    )


def loop_lines(result: SimulationReport) -> list[str]:
    loop = result.te.loop
    step, cpu, split = loop.engine_step_s, loop.engine_step_cpu_s, loop.time_split_s
    return [
        f"engine step: p50 {ms(step.p50)}, p99 {ms(step.p99)}, max {ms(step.max)} (CPU p99 {ms(cpu.p99)}); "
        f"loop time: engine {split.engine:.2f} s, telemetry {split.telemetry:.2f} s, "
        f"fluid model {split.fluid_model:.2f} s, overlay {split.overlay:.2f} s",
        f"speed: {loop.sim_s_per_wall_s:.2f} simulated s per wall s over the loop; setup: "
        + ", ".join(f"{name.removesuffix('_s')} {seconds:.2f} s" for name, seconds in result.setup_s.items()),
    ]
