"""The simulator's edge: the result as JSON and a PNG over time."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from emulation.simulate.arms import OPTIMUM
from emulation.simulate.records import CycleFigures, PhaseFigures, SimulationReport


def stem(result: SimulationReport) -> str:
    return f"simulate-{result.workload}-{result.fabric}-seed{result.seed}"


def write(result: SimulationReport, out_dir: Path) -> Path:
    """Writes STEM.json and STEM.png under out_dir; returns the JSON's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{stem(result)}.json"
    path.write_text(json.dumps(result.as_json(), indent=1) + "\n")
    plot(result, path.with_suffix(".png"))
    return path


def _phase_line(ax, result: SimulationReport, figure: Callable[[PhaseFigures], float], label: str, style: str) -> None:
    """A step line of a static figure (ECMP, spraying) over the phases."""
    phases = result.goodput_phases
    end = result.te.loop.simulated_s
    xs, ys = [], []
    for i, phase in enumerate(phases):
        stop = phases[i + 1].start_s if i + 1 < len(phases) else end
        xs += [phase.start_s, stop]
        ys += [figure(phase)] * 2
    ax.plot(xs, ys, style, label=label)


def _slowdowns(result: SimulationReport, arm: str) -> list[float]:
    """Every iteration of the arm over its job's optimum, sorted (a CDF's x)."""
    arms = result.arms or {}
    optimum = arms[OPTIMUM].jobs
    return sorted(
        t / optimum[job].p50_s for job, row in arms[arm].jobs.items() if job in optimum for t in row.times_s or []
    )


def plot(result: SimulationReport, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if result.arms is not None:
        _plot_iterations(plt, result, path)
        return
    cycles = result.cycles
    t = [c.t for c in cycles]
    fig, axes = plt.subplots(4, 1, figsize=(9, 11), sharex=True)
    fig.suptitle(f"{result.workload} on {result.fabric} ({result.gpus} GPUs, {result.flows} flows), seed {result.seed}")

    ax = axes[0]
    ax.plot(t, [(c.fraction_of_optimum or 0.0) * 100 for c in cycles], "-", label="TE (Railyard)")
    _phase_line(ax, result, lambda p: p.ecmp.fraction_of_optimum * 100, "ECMP (5-tuple hash)", "--")
    _phase_line(ax, result, lambda p: p.spray.fraction_of_optimum * 100, "ideal packet spraying", ":")
    if result.te.goal is not None:
        ax.axhline(result.te.goal.target * 100, color="grey", linewidth=0.5)
    ax.set_ylabel("% of optimum")
    ax.legend(loc="lower right")

    ax = axes[1]
    ax.plot(t, [c.collided_uplinks for c in cycles], "-", label="TE")
    ax.plot(t, [c.engine_collisions for c in cycles], "-", alpha=0.6, label="TE, as the engine sees them")
    _phase_line(ax, result, lambda p: p.ecmp.collided_uplinks, "ECMP", "--")
    ax.set_ylabel("collided uplinks")
    ax.legend(loc="upper right")

    ax = axes[2]
    width = result.telemetry.interval_s * 0.8
    ax.bar(t, [c.reroutes for c in cycles], width=width, label="reroutes")
    ax.plot(t, [c.flow_mods for c in cycles], ".", label="flow-mods")
    ax.set_ylabel("per cycle")
    if any(c.flow_mods for c in cycles):
        ax.set_yscale("symlog")
    ax.legend(loc="upper right")

    _wall_time(axes[3], cycles)
    _save(plt, fig, path)


def _wall_time(ax, cycles: list[CycleFigures]) -> None:
    """Where each cycle's wall time went."""
    t = [c.t for c in cycles]
    ax.plot(t, [c.step_s * 1e3 for c in cycles], "-", label="engine step")
    for seconds, label in (
        ([c.telemetry_s for c in cycles], "telemetry"),
        ([c.fluid_s for c in cycles], "fluid model"),
        ([c.overlay_s for c in cycles], "overlay"),
    ):
        ax.plot(t, [s * 1e3 for s in seconds], "-", alpha=0.6, label=label)
    ax.set_ylabel("wall ms per cycle")
    ax.set_xlabel("simulated time (s)")
    ax.legend(loc="upper right")


def _save(plt, fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_iterations(plt, result: SimulationReport, path: Path) -> None:
    """Iteration slowdowns per arm (a CDF), and the closed loop over time."""
    cycles = result.cycles
    t = [c.t for c in cycles]
    fig, axes = plt.subplots(3, 1, figsize=(9, 10))
    fig.suptitle(f"{result.workload} on {result.fabric} ({result.gpus} GPUs, {result.flows} flows), seed {result.seed}")
    ax = axes[0]
    for arm in result.arms or {}:
        if arm != OPTIMUM:
            xs = _slowdowns(result, arm)
            ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=arm)
    ax.set_xlabel("iteration time / the job's optimum")
    ax.set_ylabel("fraction of iterations")
    ax.legend(loc="lower right")

    ax = axes[1]
    ax.plot(t, [c.aggregate_bps / 1e12 for c in cycles], "-", label="railyard+te aggregate")
    ax.set_ylabel("Tb/s")
    ax2 = ax.twinx()
    ax2.bar(t, [c.reroutes for c in cycles], width=result.telemetry.interval_s * 0.8, alpha=0.4, color="C1")
    ax2.set_ylabel("reroutes per cycle")
    ax.legend(loc="upper right")

    _wall_time(axes[2], cycles)
    _save(plt, fig, path)
