"""`railyard scenario run`: the same scenario, same seed, twice in one
invocation — underlay ECMP only, then with Railyard TE — each on a fresh
fabric with the real controller daemon and telemetry agent, then the report.

Unbounded flows (steady elephants, judged by goodput) run as iperf3;
finite transfers, on/off sources and jobs' iterations run on persistent
connections (emulation/traffic/transfers.py). Rates and sizes in the file
are the real fabric's; both are scaled by emulated/real NIC rate, so every
time in the file means the same here as in the simulator.
"""

from __future__ import annotations

import logging
import math
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import grpc

from controller.fabric import Fabric
from controller.fabric import addressing as ad
from controller.intent.drains import DrainTarget
from controller.metrics import TE_DECISIONS
from controller.te.jobs import JobRequest
from emulation.agent.telemetry_agent import TelemetryAgent
from emulation.net import netns, ovs
from emulation.net.fabric import EmulatedFabric, sflow_sampling
from emulation.processes.controller_process import ControllerProcess, Ports, free_port, total
from emulation.scenarios.sampling import FabricWatch, Sample, underlay_vias
from emulation.scenarios.timeline import Decided, read_decisions
from emulation.traffic.iperf import FlowResult, FlowSpec, TrafficRun
from emulation.traffic.records import Iteration, Schedule, Stream, StreamResult
from emulation.traffic.transfers import TransferEngine
from emulation.workload import Workload, WorkloadError
from emulation.workload.events import check_events
from emulation.workload.expand import Placed, Placer, Plan, Transfer, expand
from emulation.workload.model import Event, FlowsItem, Item, JobItem, JobMixItem, PatternItem, Window
from emulation.workload.placers import railyard_placer

log = logging.getLogger(__name__)


class ScenarioMode(StrEnum):
    """How a scenario's fabric is run; the value names the report's section and files."""

    ECMP = "ecmp"  # the underlay's hashing alone: no controller
    TE = "te"  # Railyard's controller with adaptive TE


MAX_EMULATED_S = 600.0
# Where TE's telemetry comes from: the emulation's agent process, the
# switches' own sFlow agents, or the controller's OpenFlow statistics.
TELEMETRY = ("agent", "sflow", "openflow")
# Who installs the ECMP underlay: the emulation (ovs-ofctl, cookie 0), or the
# controller (`--underlay`, on a fabric brought up bare), in both runs.
UNDERLAYS = ("fabric", "controller")
OPENFLOW_STATS_S = 1.0  # the controller's port-statistics period in `--telemetry openflow` runs


@dataclass(frozen=True)
class Sources:
    telemetry: str = "agent"
    underlay: str = "fabric"
    programs: bool = True  # False: the TE run's controller is advisory (--southbound none)

    def __post_init__(self) -> None:
        if self.telemetry not in TELEMETRY:
            raise WorkloadError("--telemetry", f"{self.telemetry!r}", ", ".join(TELEMETRY))
        if self.underlay not in UNDERLAYS:
            raise WorkloadError("--underlay", f"{self.underlay!r}", ", ".join(UNDERLAYS))


AGENT_AND_FABRIC = Sources()  # what every run used before there was a choice


@dataclass
class ModeRun:
    mode: ScenarioMode
    plan: Plan
    flows: list[FlowSpec]  # the plan's unbounded transfers, run as iperf3, in plan order
    results: list[FlowResult] = field(default_factory=list)
    streams: list[StreamResult] = field(default_factory=list)  # the other transfers, in plan order
    iterations: list[Iteration] = field(default_factory=list)
    skipped_events: list[str] = field(default_factory=list)  # drains, in a run with no controller to drain
    # ECMP run: the spine the underlay hashes each job flow across (transfer index -> via), asked of the switches
    underlay_vias: dict[int, str] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    drops: int = 0  # at switch egress queues
    drops_by_port: dict[str, int] = field(default_factory=dict)  # interface -> drops at its queue
    policed: int = 0  # by Railyard's meters at sending leaves
    te_decisions: dict[str, float] = field(default_factory=dict)
    decisions: list[Decided] = field(default_factory=list)  # the controller's, since traffic start
    # Mean decision -> bundle committed, from the controller's histogram (it
    # exports no per-decision commit time); None when nothing was committed.
    commit_s: float | None = None
    flow_mods: float = 0.0
    reconcile_failures: float = 0.0  # failed reconcile passes of the TE run's controller
    controller_log: str = ""  # the TE run's daemon log: every decision, with its reason

    def streamed(self) -> dict[int, StreamResult]:
        """What the transfer engine measured, by plan index: every transfer iperf3 does not run."""
        return dict(zip((i for i, t in enumerate(self.plan.transfers) if not t.unbounded), self.streams))


def emulation_scale(fabric: Fabric) -> float:
    """Emulated bits per real bit: sizes and rates shrink by it, times stay."""
    return fabric.spec.rates.emulated_nic_mbps * 1e6 / (fabric.spec.rates.nic_gbps * 1e9)


def check_emulable(workload: Workload) -> None:
    """What the emulation cannot run, refused before a fabric is built."""
    if workload.duration_s > MAX_EMULATED_S:
        raise WorkloadError(
            "duration_s", f"got {workload.duration_s:g}", f"at most {MAX_EMULATED_S:g} s in the emulation"
        )
    for i, item in enumerate(workload.traffic):
        for where, window in _steady_windows(item, f"traffic[{i}]"):
            length = window.stop(workload.duration_s) - window.start_s
            if abs(length - round(length)) > 1e-9 or length < 1:
                raise WorkloadError(
                    f"{where}.stop_s",
                    f"a steady flow sending {length:g} s",
                    "whole seconds, at least one (iperf3 runs and reports steady flows by the second)",
                )
    for i, job in enumerate(workload.traffic):
        if isinstance(job, JobItem | JobMixItem) and job.iterations and job.protocol == "udp":
            raise WorkloadError(
                f"traffic[{i}].protocol",
                "udp iterations cannot finish in the emulation: it has no PFC, so a lost datagram is never resent",
                "tcp for a job with iterations (udp for unbounded jobs)",
            )


def _steady_windows(item: Item, where: str) -> list[tuple[str, Window]]:
    """The windows of an item's unbounded, always-on flows (those iperf3 runs)."""
    if isinstance(item, PatternItem) and not item.bytes and not item.window.on_s:
        return [(where, item.window)]
    if isinstance(item, FlowsItem):
        return [
            (f"{where}.flows[{j}]", f.window) for j, f in enumerate(item.flows) if not f.bytes and not f.window.on_s
        ]
    if isinstance(item, JobItem) and not item.iterations:
        return [(where, Window(item.start_s, item.stop_s))]
    if isinstance(item, JobMixItem) and not item.iterations:
        return [(where, Window())]
    return []


def api_placer(client) -> Placer:
    """Jobs placed through the PlacementService, as a scheduler would."""

    def place_one(request: JobRequest) -> Placed | None:
        try:
            job = client.place_job(
                request.job_id,
                request.gpu_count,
                request.pattern.value,
                request.flow_gbps,
                gpus_per_server=request.gpus_per_server,
                servers=request.servers,
            ).job
            job_flows = client.job_flows(request.job_id)
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED:
                return None
            raise
        gpus = tuple(ad.parse_nic_address(g.nic_address) for g in sorted(job.gpus, key=lambda g: g.rank))
        flows = tuple(
            (ad.parse_nic_address(f.src_address), ad.parse_nic_address(f.dst_address), f.spine) for f in job_flows
        )
        return Placed(gpus, flows)

    return place_one


def flow_spec(t: Transfer, scale: float, duration_s: float) -> FlowSpec:
    rate = t.rate_bps * scale if math.isfinite(t.rate_bps) else 0.0
    return FlowSpec(t.src, t.dst, t.protocol, t.src_port, t.dst_port, rate, t.window.start_s, t.window.stop(duration_s))


def steady_flows(fabric: Fabric, plan: Plan, duration_s: float) -> list[FlowSpec]:
    """The plan's unbounded flows, as iperf3 runs them (emulated units), in plan order."""
    scale = emulation_scale(fabric)
    return [flow_spec(t, scale, duration_s) for t in plan.transfers if t.unbounded]


def stream(emu: EmulatedFabric, t: Transfer, scale: float, duration_s: float) -> Stream:
    return Stream(
        f"{ad.nic_ip(t.src)}:{t.src_port} -> {ad.nic_ip(t.dst)}:{t.dst_port}/{t.protocol}",
        emu.pid_of(t.src),
        emu.pid_of(t.dst),
        ad.nic_ip(t.src),
        ad.nic_ip(t.dst),
        t.protocol,
        t.src_port,
        t.dst_port,
        t.rate_bps * scale,
        math.ceil(t.bytes * scale) if t.bytes else 0,
        () if t.job else tuple(t.window.bursts(duration_s)),
    )


def run_mode(
    fabric: Fabric,
    spec_path,
    workload: Workload,
    seed: int,
    mode: ScenarioMode,
    workdir: Path,
    progress: Callable[[str], None],
    raw_dir: Path | None = None,
    sources: Sources = AGENT_AND_FABRIC,
) -> ModeRun:
    """ECMP: the fabric alone (its underlay), no controller; jobs placed by
    the same placement code in-process, so both runs carry the same flows.
    TE: the daemon and its telemetry attached (the agent process, the
    switches' sFlow, or the daemon's OpenFlow statistics), placement through
    the API. With the controller's underlay both runs start a daemon, the
    ECMP run's with TE off."""
    te = mode is ScenarioMode.TE
    ports = Ports.pick()
    extra: list[str] = ["--underlay"] if sources.underlay == "controller" else []
    if te and not sources.programs:
        extra += ["--southbound", "none"]
    sflow = None
    if te and sources.telemetry == "sflow":
        target = f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}"
        extra += ["--sflow-listen", target]
        sflow = ovs.SflowExport(target, sflow_sampling(fabric))
    elif te and sources.telemetry == "openflow":
        extra += ["--openflow-stats-interval", f"{OPENFLOW_STATS_S:g}"]
    decisions = workdir / f"decisions-{mode}.jsonl"
    ctl = ControllerProcess(
        spec_path,
        workdir / f"{mode}.db",
        ports,
        workdir / f"controller-{mode}.log",
        reconcile_interval_s=2.0,
        te=te,
        extra_args=("--te-decisions", str(decisions), *extra),
    )
    run = None
    duration = workload.duration_s
    scale = emulation_scale(fabric)
    bare = sources.underlay == "controller"
    with EmulatedFabric(fabric, controller=ports.controller_target, bare=bare, sflow=sflow) as emu:
        agent = None
        client = None
        try:
            if te or bare:
                ctl.start()
                if sources.programs or not te:
                    ctl.wait_ready(len(fabric.switches), timeout_s=60)
                else:
                    ctl.wait_serving_api(timeout_s=60)  # advisory: no switch connects
            if te:
                if sources.telemetry == "agent":
                    agent = TelemetryAgent(fabric, f"127.0.0.1:{ports.grpc}").start()
                client = ctl.client()
                plan = expand(fabric, workload, seed, api_placer(client))
            else:
                plan = expand(fabric, workload, seed, railyard_placer(fabric))
            run = ModeRun(mode, plan, steady_flows(fabric, plan, duration))
            if not te:
                run.underlay_vias = underlay_vias(fabric, plan)
            engine = _transfer_engine(emu, plan, scale, duration)
            watch = FabricWatch(fabric)
            traffic = TrafficRun(emu.popen, run.flows, duration, raw_dir).start() if run.flows else None
            engine.start()
            start = time.time()
            watch.start(start)
            timers = _schedule(fabric, workload.events, client, run.skipped_events)
            while time.time() - start < duration:
                time.sleep(1.0)
                progress(f"{workload.name} [{mode}] {min(time.time() - start, duration):4.1f}/{duration:g} s")
            # Bounded: a flow whose path died may never finish on its own.
            run.results = traffic.wait(grace_s=5.0) if traffic else []
            engine.wait()
            run.streams, run.iterations = engine.results, engine.iterations
            for timer in timers:
                timer.join()
            watch.stop()
            # The run's own seconds: after them, traffic is only winding down.
            run.samples = [s for s in watch.samples if s.t <= duration]
            run.drops_by_port = watch.drops_by_port
            run.drops = sum(run.drops_by_port.values())
            run.policed = watch.policed.total
            if not te:
                return run
            if agent is not None:
                agent.stop()
            samples = ctl.metrics()
            run.te_decisions = {k: total(samples, "railyard_te_decisions_total", kind=k) for k in TE_DECISIONS}
            run.flow_mods = total(samples, "railyard_flow_mods_total")
            run.reconcile_failures = total(samples, "railyard_reconcile_runs_total", result="failed")
            commits = total(samples, "railyard_te_reaction_seconds_count")
            if commits:
                run.commit_s = total(samples, "railyard_te_reaction_seconds_sum") / commits
            run.decisions = read_decisions(decisions, start)
        finally:
            if agent is not None:
                agent.stop()
            if client is not None:
                client.close()
            ctl.stop()
            if te and run is not None:
                run.controller_log = (workdir / f"controller-{mode}.log").read_text(errors="replace")
    return run


def _transfer_engine(emu: EmulatedFabric, plan: Plan, scale: float, duration: float) -> TransferEngine:
    """The plan's bounded transfers (finite, on/off, jobs' iterations) on one
    engine, its connections opened if it has any."""
    others = [i for i, t in enumerate(plan.transfers) if not t.unbounded]
    position = {index: k for k, index in enumerate(others)}
    engine = TransferEngine(
        [stream(emu, plan.transfers[i], scale, duration) for i in others],
        [
            Schedule(j.job_id, tuple(position[i] for i in j.transfers), j.iterations, j.compute_gap_s, j.start_s)
            for j in plan.jobs
            if j.iterations and j.transfers  # a one-server job talks over NVLink, not the fabric
        ],
        duration,
    )
    if others:
        engine.open()
    return engine


def _schedule(fabric: Fabric, events: Sequence[Event], client, skipped: list[str]) -> list[threading.Timer]:
    """Each scenario event started on a timer, at its time from now."""
    timers = [threading.Timer(event.at_s, _apply, args=(fabric, event, client, skipped)) for event in events]
    for timer in timers:
        timer.start()
    return timers


def _apply(fabric: Fabric, event: Event, client, skipped: list[str]) -> None:
    """A scenario event, at its time. Links and switches fail by their ports
    (carrier lost at both ends, as a cable or a box does); drains go through
    the controller, and a run without one has nothing to drain."""
    what = f"{event.kind} {event.target} at {event.at_s:g} s"
    if event.kind in ("drain", "undrain"):
        if client is None:
            skipped.append(what + ": no controller in this run")
            return
        client.drain(DrainTarget.LINK if event.on_link else DrainTarget.SWITCH, event.target, event.kind == "drain")
    else:
        state = "down" if event.kind.endswith("_down") else "up"
        if event.on_link:
            switch, _, port = event.target.rpartition(":")
            ports = [int(port)]
        else:
            switch, ports = event.target, sorted(fabric.ports(event.target))
        netns.run_batch(None, "ip", [f"link set {ad.switch_port_name(switch, p)} {state}" for p in ports])
    log.info("scenario: %s", what)


def run_scenario(
    fabric: Fabric,
    spec_path,
    workload: Workload,
    seed: int,
    progress: Callable[[str], None] = lambda _: None,
    raw_dir: Path | None = None,
    sources: Sources = AGENT_AND_FABRIC,
) -> dict[ScenarioMode, ModeRun]:
    """`raw_dir`: keep iperf3's own JSON reports there, one folder per mode."""
    # Refusals (an event that is no uplink, what the emulation cannot run) stop here, before Mininet.
    workload = check_events(workload, fabric)
    check_emulable(workload)
    expand(fabric, workload, seed, railyard_placer(fabric))  # placement and flows: refused here, if at all
    with tempfile.TemporaryDirectory(prefix="railyard-scenario-") as tmp:
        return {
            mode: run_mode(
                fabric,
                spec_path,
                workload,
                seed,
                mode,
                Path(tmp),
                progress,
                raw_dir / mode if raw_dir else None,
                sources,
            )
            for mode in ScenarioMode
        }
