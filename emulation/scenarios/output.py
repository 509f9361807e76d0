"""A scenario report written out: JSON for machines, PNG plots, the TE run's
controller log and its decisions (one JSON record a line, as the controller
wrote them)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from controller.fabric import Endpoint, Fabric
from emulation.scenarios.records import ScenarioReport
from emulation.scenarios.runner import ModeRun, ScenarioMode


def report_stem(scenario: str, fabric: str, seed: int, telemetry: str = "agent", underlay: str = "fabric") -> str:
    """The files' common name: names come from YAML files, so anything but
    letters, digits, '.', '_' and '-' becomes '_' and no name climbs out of
    the output directory ('../../x' is written as '_.._x' inside it). A run
    on other sources than the agent and the emulation's underlay says so."""
    sources = "" if telemetry == "agent" else f"-{telemetry}"
    sources += "" if underlay == "fabric" else f"-{underlay}-underlay"
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{scenario}-{fabric}-seed{seed}{sources}").lstrip(".") or "scenario"


def write(report: ScenarioReport, runs: Mapping[ScenarioMode, ModeRun], fabric: Fabric, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = report_stem(report.scenario, report.fabric, report.seed, report.telemetry, report.underlay)
    path = out_dir / f"{stem}.json"
    path.write_text(json.dumps(report.as_json(), indent=2) + "\n")
    _plots(report, runs, fabric, out_dir / f"{stem}.png")
    for mode, run in runs.items():
        if run.controller_log:
            (out_dir / f"{stem}-{mode}-controller.log").write_text(run.controller_log)
        if run.decisions:
            records = "".join(json.dumps(d.decision.as_record()) + "\n" for d in run.decisions)
            (out_dir / f"{stem}-{mode}-decisions.jsonl").write_text(records)
    return path


def _plots(report: ScenarioReport, runs: Mapping[ScenarioMode, ModeRun], fabric: Fabric, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(runs)
    fig, axes = plt.subplots(1 + 2 * len(modes), 1, figsize=(10, 3 + 2.6 * 2 * len(modes)))
    flows = report.modes[modes[0]].flows
    x = range(len(flows))
    width = 0.8 / len(modes)
    for i, mode in enumerate(modes):
        axes[0].bar(
            [j + i * width for j in x],
            [f.goodput_mbps for f in report.modes[mode].flows],
            width,
            label=mode.upper(),
        )
    axes[0].plot(
        [j + 0.4 - width / 2 for j in x], [f.optimum_mbps for f in flows], "k_", markersize=18, label="optimum"
    )
    axes[0].set_xticks([j + 0.4 - width / 2 for j in x], [f.flow.replace(" -> ", "\n-> ") for f in flows], fontsize=6)
    axes[0].set_title(f"{report.scenario}: per-flow goodput (seed {report.seed})")
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
        bottleneck = report.modes[mode].bottleneck_queue.port
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
    if report.modes[modes[0]].jobs:
        _iteration_cdf(report, path.with_name(path.stem + "-iterations.png"))


def _iteration_cdf(report: ScenarioReport, path: Path) -> None:
    """Per job, the CDF of its iteration times, ECMP against TE."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    styles: dict[str, str] = {ScenarioMode.ECMP: "--", ScenarioMode.TE: "-"}
    for mode, figures in report.modes.items():
        for k, job in enumerate(figures.jobs):
            times = sorted(t for _, t in job.times_s if t is not None)
            if times:
                ax.step(
                    times,
                    [(i + 1) / len(times) for i in range(len(times))],
                    styles.get(mode, ":"),
                    color=f"C{k}",
                    where="post",
                    label=f"{job.job} {mode.upper()}",
                )
    for k, job in enumerate(next(iter(report.modes.values())).jobs):
        if job.optimum_s:
            ax.axvline(job.optimum_s, color=f"C{k}", linestyle=":", linewidth=1, label=f"{job.job} optimum")
    ax.set_xlabel("iteration time (s)")
    ax.set_ylabel("CDF")
    ax.set_title(f"{report.scenario} on {report.fabric}, seed {report.seed}: iteration times")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
