"""Scenario reports: the figures of the two runs, judged against the optimum.
Pure; `table.py` prints them, `output.py` writes them (JSON, PNG)."""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

from controller.fabric import Endpoint, Fabric
from controller.fabric import addressing as ad
from emulation.model.optimum import OptimumKind
from emulation.model.stats import percentile
from emulation.scenarios.emulable import emulation_scale
from emulation.scenarios.iterations import burst_figures, job_figures, on_off_figures
from emulation.scenarios.judge import (
    OPTIMUM_NOTE,
    TOLERANCE,
    ControllerFailed,
    JudgedFlow,
    OptimumExceeded,
    Phase,
    RunInvalid,
    check,
    judge,
    phases,
    planned_intervals,
)
from emulation.scenarios.records import (
    FlowFigures,
    Incast,
    ModeFigures,
    Optimum,
    OptimumPhase,
    Queue,
    ScenarioReport,
    SpineTier,
)
from emulation.scenarios.runner import AGENT_AND_FABRIC, ModeRun, ScenarioMode, Sources
from emulation.scenarios.timeline import te_figures
from emulation.traffic.iperf import FlowResult
from emulation.traffic.records import StreamResult
from emulation.workload import Workload
from emulation.workload.events import check_events
from emulation.workload.model import PatternItem
from emulation.workload.ports import BYSTANDER


def jain(values: list[float]) -> float | None:
    """Jain's fairness index: 1 when all equal, 1/n when one takes
    everything; None for no values, or none above zero (0/0)."""
    if not values or not any(values):
        return None
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def longest_zero_run_s(intervals: tuple[float, ...], floor_bps: float = 1e5) -> int:
    run = best = 0
    for bps in intervals:
        run = run + 1 if bps < floor_bps else 0
        best = max(best, run)
    return best


def mode_figures(fabric: Fabric, run: ModeRun, phases_: Sequence[Phase], workload: Workload) -> ModeFigures:
    duration_s = workload.duration_s
    judged = judge(phases_, run.results, duration_s)
    share = [f.goodput_bps / f.optimum_bps if f.optimum_bps else 0.0 for f in judged.flows]
    tier = fabric.spine_tier
    capacity = {e: fabric.link_at(e).emulated_bps for e in tier}
    peaks = [max((s.tx_bps.get(e, 0.0) / capacity[e] for e in tier), default=0.0) for s in run.samples]
    # Queues are judged like goodput: in steady state, from a second after the
    # last flows started (the controller's reaction to them is that second);
    # the peak, transient included, is reported beside.
    steady_from = max((f.start_s for f in run.flows), default=0.0) + 1.0
    queues: dict[Endpoint, list[int]] = {}
    for s in run.samples:
        if s.t >= steady_from:
            for e, q in s.queue_bytes.items():
                queues.setdefault(e, []).append(q)
    bottleneck = max(queues, key=lambda e: (percentile(queues[e], 0.99), sum(queues[e]))) if queues else None
    backlog = queues[bottleneck] if bottleneck is not None else []
    peak = max((q for s in run.samples for q in s.queue_bytes.values()), default=0)
    te = te_figures(
        fabric,
        run.decisions,
        [(s.t, s.tx_bps) for s in run.samples],
        workload.traffic_changes(duration_s),
        run.commit_s,
        len(run.plan.transfers),
    )
    streamed = run.streamed()
    stretches = [(p.start_s, p.end_s, p.outage) for p in phases_]
    sizes = {j.job_id: streamed[j.transfers[0]].stream.bytes for j in run.plan.jobs if j.iterations and j.transfers}
    return ModeFigures(
        flows=[_flow_figures(r, f, duration_s) for r, f in zip(run.results, judged.flows)],
        totals=judged.totals,
        phases=judged.phases,
        jain_fairness=jain(share),
        max_spine_tier_utilization=SpineTier(statistics.fmean(peaks) if peaks else 0.0, max(peaks, default=0.0)),
        bottleneck_queue=Queue(
            port=f"{bottleneck.node}:{bottleneck.port}" if bottleneck else "",
            p50_bytes=percentile(backlog, 0.5),
            p99_bytes=percentile(backlog, 0.99),
            steady_from_s=steady_from,
            peak_bytes_any_port_any_time=peak,
        ),
        drops=run.drops,
        policed=run.policed,
        incast=incast_figures(fabric, workload, run, share, steady_from),
        jobs=job_figures(fabric, run.plan, run.iterations, stretches, sizes, run.underlay_vias),
        bursts=burst_figures(run.plan, list(streamed.items())),
        on_off=on_off_figures(run.plan, list(streamed.items()), duration_s),
        emulation_scale=emulation_scale(fabric),
        transfer_errors=[f"{r.stream.name}: {r.error}" for r in run.streams if r.error],
        skipped_events=run.skipped_events,
        te_decisions=run.te_decisions,
        te=te,
        flow_mods=run.flow_mods,
        reconcile_failures=run.reconcile_failures,
        host_cpu=run.host_cpu,
    )


def _flow_figures(result: FlowResult, judged: JudgedFlow, duration_s: float) -> FlowFigures:
    intervals = planned_intervals(result, duration_s)
    return FlowFigures(
        flow=result.flow.five_tuple,
        goodput_mbps=judged.goodput_bps / 1e6,
        optimum_mbps=judged.optimum_bps / 1e6,
        single_path_optimum_mbps=None if judged.single_path_bps is None else judged.single_path_bps / 1e6,
        min_interval_mbps=min(intervals, default=0.0) / 1e6,
        longest_zero_s=longest_zero_run_s(intervals),
        error=result.error,
    )


def incast_figures(
    fabric: Fabric, workload: Workload, run: ModeRun, share: list[float], steady_from: float
) -> Incast | None:
    """The first incast item's senders' fairness, and its bystander's share
    of its fair rate. `share`: each unbounded flow's goodput over its max-min
    optimum. Senders with bytes (bursts) are judged by what each delivered."""
    item = next(
        (i for i, it in enumerate(workload.traffic) if isinstance(it, PatternItem) and it.kind == "incast"), None
    )
    if item is None:
        return None
    steady = {i: k for k, i in enumerate(i for i, t in enumerate(run.plan.transfers) if t.unbounded)}
    streamed = run.streamed()
    ours = [i for i, t in enumerate(run.plan.transfers) if t.item == item]
    bystander = [steady[i] for i in ours if run.plan.transfers[i].role == BYSTANDER]
    senders = [i for i in ours if run.plan.transfers[i].role != BYSTANDER]
    receiver = run.plan.transfers[senders[0]].dst
    port = fabric.attachment(receiver)
    # Where the incast converges: the receiver's port and every port feeding its
    # leaf from above (which one fills depends on how the senders are routed).
    # Elsewhere in a mix, other traffic fills queues too.
    into = [port, *(fabric.ports(port.node)[u.port].peer(port.node) for u in fabric.uplinks(port.node))]
    backlog = [max(s.queue_bytes.get(e, 0) for e in into) for s in run.samples if s.t >= steady_from]
    names = {ad.switch_port_name(e.node, e.port) for e in into}
    # A steady sender by its goodput over its fair share; one that bursts or
    # pauses by what arrived over what it offered (or, elastic with nothing
    # offered, over the best sender's).
    delivered = [share[steady[i]] if i in steady else _delivered(streamed[i], workload.duration_s) for i in senders]
    if any(d is None for d in delivered):
        carried = [float(sum(streamed[i].interval_bytes)) for i in senders]
        delivered = [c / max(carried) if max(carried) else 0.0 for c in carried]
    fractions = [d for d in delivered if d is not None]
    return Incast(
        item=item,
        converging_ports=sorted(f"{e.node}:{e.port}" for e in into),
        converging_queue_p50_bytes=percentile(backlog, 0.5),
        converging_queue_p99_bytes=percentile(backlog, 0.99),
        converging_drops=sum(run.drops_by_port.get(name, 0) for name in names),
        senders_jain=jain(fractions),
        senders_min_share=min(fractions, default=0.0),
        bystander_share=share[bystander[0]] if bystander else None,
    )


def _delivered(result: StreamResult, duration_s: float) -> float | None:
    """What arrived over what the flow offered; None: elastic, it offered no amount."""
    s = result.stream
    received = float(sum(result.interval_bytes))
    if s.bytes:
        offered = float(s.bytes * len(result.bursts))
    elif math.isfinite(s.rate_bps):
        offered = s.rate_bps / 8 * sum(min(stop, duration_s) - start for start, stop in s.windows)
    else:
        return None
    return received / offered if offered else 0.0


def optimum_figures(phases_: Sequence[Phase], duration_s: float) -> Optimum:
    """The optimum the runs are judged against, phase by phase."""
    return Optimum(
        kind=OptimumKind.SPLITTABLE.value,
        about=OPTIMUM_NOTE,
        tolerance=TOLERANCE,
        aggregate_mbps=sum(p.bounds.splittable.aggregate_bps * (p.end_s - p.start_s) for p in phases_)
        / duration_s
        / 1e6,
        phases=[_optimum_phase(p) for p in phases_],
    )


def _optimum_phase(p: Phase) -> OptimumPhase:
    best, single = p.bounds.splittable, p.bounds.single_path
    return OptimumPhase(
        from_s=p.start_s,
        to_s=p.end_s,
        dead_links=list(p.dead_links),
        aggregate_mbps=best.aggregate_bps / 1e6,
        method=best.method,
        single_path_mbps=None if single is None else single.aggregate_bps / 1e6,
        single_path_method=None if single is None else single.method,
        throughput_bound_mbps=p.bounds.throughput_bps / 1e6,
        solve_s=p.bounds.solve_s,
        rates_mbps=[r / 1e6 for r in best.rates_bps],
        routes=[[[via, bps / 1e6] for via, bps in route] for route in best.routes],
        single_path_vias=None if single is None else list(single.vias),
    )


def build_report(
    fabric: Fabric,
    workload: Workload,
    seed: int,
    runs: Mapping[ScenarioMode, ModeRun],
    sources: Sources = AGENT_AND_FABRIC,
) -> ScenarioReport:
    """Both runs judged against the exact optimum, phase by phase around the
    failures: the unbounded flows by goodput, each job's iterations against
    its own lower bound. Raises OptimumExceeded (with the report attached)
    when a run beats the bound, ControllerFailed when the TE run's
    controller failed a reconcile pass (its figures would not be TE's: a
    crash on a new fabric shape once read as TE losing to ECMP)."""
    workload = check_events(workload, fabric)
    # Each run against the optimum of its own flows (the same pairs in both runs
    # by construction; placed jobs could in principle differ).
    by_flows: dict[tuple, list[Phase]] = {}
    phase_of = {}
    for mode, run in runs.items():
        key = tuple((f.src, f.dst, f.protocol, f.rate_bps) for f in run.flows)
        if key not in by_flows:
            by_flows[key] = phases(fabric, workload.events, workload.duration_s, run.flows)
        phase_of[mode] = by_flows[key]
    shown = phase_of[ScenarioMode.TE] if ScenarioMode.TE in phase_of else next(iter(phase_of.values()))
    modes: dict[str, ModeFigures] = {
        mode: mode_figures(fabric, run, phase_of[mode], workload) for mode, run in runs.items()
    }
    report = functools.partial(
        ScenarioReport,
        scenario=workload.name,
        description=workload.description,
        fabric=fabric.spec.name,
        seed=seed,
        telemetry=sources.telemetry,
        underlay=sources.underlay,
        duration_s=workload.duration_s,
        events=[{"at_s": e.at_s, e.kind: e.target} for e in workload.events],
        optimum=optimum_figures(shown, workload.duration_s),
    )
    checked: dict[str, ModeFigures] = {}
    for name, figures in modes.items():
        try:
            checked[name] = _checked(name, figures)
        except RunInvalid as exc:
            if isinstance(exc, OptimumExceeded):
                checked[name] = replace(figures, optimum_check=f"failed: {exc}")
            exc.report = report(modes={**modes, **checked})  # the figures that show it, kept for inspection
            raise
    return report(modes=checked)


def _checked(mode: str, figures: ModeFigures) -> ModeFigures:
    """The figures with what the optimum check found; raises what makes a
    run's figures not what they claim to be."""
    if figures.reconcile_failures:
        raise ControllerFailed(
            f"{mode} run: the controller failed {figures.reconcile_failures:g} reconcile pass(es); "
            "the run measured a fabric TE did not program (see the controller log)"
        )
    if figures.failed_flows or figures.transfer_errors:
        # A flow that did not run (an iperf3 error, reported per flow) leaves
        # its share to the others: the optimum of the flows that were meant
        # to run is no bound on them. The error is the finding.
        return replace(figures, optimum_check="skipped: a flow reported an error")
    check(mode, figures)
    return replace(figures, optimum_check="passed")
