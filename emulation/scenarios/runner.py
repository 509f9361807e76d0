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
from emulation.scenarios.emulable import check_emulable, emulation_scale, steady_flows, transfer_engine
from emulation.scenarios.machine import CpuTicks, HostCpu
from emulation.scenarios.sampling import FabricWatch, Sample, underlay_vias
from emulation.scenarios.timeline import Decided, read_decisions
from emulation.traffic.iperf import FlowResult, FlowSpec, TrafficRun
from emulation.traffic.records import Iteration, StreamResult
from emulation.workload import Workload, WorkloadError
from emulation.workload.events import check_events
from emulation.workload.expand import Placed, Placer, Plan, expand
from emulation.workload.model import Event
from emulation.workload.placers import railyard_placer

log = logging.getLogger(__name__)


class ScenarioMode(StrEnum):
    """How a scenario's fabric is run; the value names the report's section and files."""

    ECMP = "ecmp"  # the underlay's hashing alone: no controller
    TE = "te"  # Railyard's controller with adaptive TE


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
    host_cpu: HostCpu | None = None  # the machine's CPUs while the traffic ran
    controller_log: str = ""  # the TE run's daemon log: every decision, with its reason

    def streamed(self) -> dict[int, StreamResult]:
        """What the transfer engine measured, by plan index: every transfer iperf3 does not run."""
        return dict(zip((i for i, t in enumerate(self.plan.transfers) if not t.unbounded), self.streams))


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
                qps_per_connection=request.qps_per_connection,
            ).job
            job_flows = client.job_flows(request.job_id)
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED:
                return None
            raise
        gpus = tuple(ad.parse_nic_address(g.nic_address) for g in sorted(job.gpus, key=lambda g: g.rank))
        flows = tuple(
            (ad.parse_nic_address(f.src_address), ad.parse_nic_address(f.dst_address), f.spine, f.src_port)
            for f in job_flows
        )
        return Placed(gpus, flows)

    return place_one


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
    daemon = _daemon(fabric, spec_path, mode, workdir, sources)
    ctl, ports = daemon.process, daemon.process.ports
    run = None
    bare = sources.underlay == "controller"
    with EmulatedFabric(fabric, controller=ports.controller_target, bare=bare, sflow=daemon.sflow) as emu:
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
            run = ModeRun(mode, plan, steady_flows(fabric, plan, workload.duration_s))
            if not te:
                run.underlay_vias = underlay_vias(fabric, plan)
            start = _drive(emu, fabric, workload, run, client, raw_dir, progress)
            if not te:
                return run
            if agent is not None:
                agent.stop()
            _te_figures(run, ctl.metrics(), daemon.decisions, start)
        finally:
            if agent is not None:
                agent.stop()
            if client is not None:
                client.close()
            ctl.stop()
            if te and run is not None:
                run.controller_log = daemon.log.read_text(errors="replace")
    return run


@dataclass(frozen=True)
class _Daemon:
    """The controller a run starts (not yet started), and what it writes."""

    process: ControllerProcess
    sflow: ovs.SflowExport | None  # the switches' own sFlow, exported to it (TE on sFlow)
    decisions: Path  # its TE decision records
    log: Path


def _daemon(fabric: Fabric, spec_path, mode: ScenarioMode, workdir: Path, sources: Sources) -> _Daemon:
    """The run's controller, its options from the mode and the sources."""
    te = mode is ScenarioMode.TE
    # Open vSwitch's bundle action: a select group set up over OpenFlow 1.3 would hash in a second
    # datapath pass that neither the agent nor sFlow sees (controller/southbound/underlay.py).
    extra: list[str] = ["--underlay", "ovs-bundle"] if sources.underlay == "controller" else []
    if te and not sources.programs:
        extra += ["--southbound", "none"]
    sflow = None
    if te and sources.telemetry == "sflow":
        target = f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}"
        extra += ["--sflow-listen", target]
        sflow = ovs.SflowExport(target, sflow_sampling(fabric))
    elif te and sources.telemetry == "openflow":
        extra += ["--openflow-stats-interval", f"{OPENFLOW_STATS_S:g}"]
    decisions, log = workdir / f"decisions-{mode}.jsonl", workdir / f"controller-{mode}.log"
    store = workdir / f"{mode}.db"
    # A workdir another run of this mode used (bench.telemetry, one per seed): its records would be read as
    # this run's (decisions before the traffic count at its start), and its intent would be this run's.
    for stale in (decisions, log, *(store.with_name(store.name + end) for end in ("", "-wal", "-shm", ".lock"))):
        stale.unlink(missing_ok=True)
    ctl = ControllerProcess(
        spec_path,
        store,
        Ports.pick(),
        log,
        reconcile_interval_s=2.0,
        te=te,
        extra_args=("--te-decisions", str(decisions), *extra),
    )
    return _Daemon(ctl, sflow, decisions, log)


def _drive(
    emu: EmulatedFabric,
    fabric: Fabric,
    workload: Workload,
    run: ModeRun,
    client,
    raw_dir: Path | None,
    progress: Callable[[str], None],
) -> float:
    """The run's traffic and the scenario's events for its duration, the
    fabric watched meanwhile; what they measured goes into `run`. The wall
    time traffic started at."""
    duration = workload.duration_s
    emu.arbitrate((t.src, t.dst, (t.protocol, t.src_port, t.dst_port)) for t in run.plan.transfers)
    engine = transfer_engine(emu, run.plan, emulation_scale(fabric), duration)
    watch = FabricWatch(fabric)
    ticks = CpuTicks.read()
    start = time.time()  # the clock of the run's traffic, started before its first flow
    traffic = TrafficRun(emu.popen, run.flows, duration, raw_dir).start() if run.flows else None
    engine.start()
    watch.start(start)
    timers = _schedule(fabric, workload.events, client, run.skipped_events)
    while time.time() - start < duration:
        time.sleep(1.0)
        progress(f"{workload.name} [{run.mode}] {min(time.time() - start, duration):4.1f}/{duration:g} s")
    run.host_cpu = CpuTicks.read().since(ticks)  # over the run's own seconds, not its winding down
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
    return start


def _te_figures(run: ModeRun, samples, decisions: Path, start: float) -> None:
    """What the TE run's controller counted (`samples`: its metrics at the end) and decided since `start`."""
    run.te_decisions = {k: total(samples, "railyard_te_decisions_total", kind=k) for k in TE_DECISIONS}
    run.flow_mods = total(samples, "railyard_flow_mods_total")
    run.reconcile_failures = total(samples, "railyard_reconcile_runs_total", result="failed")
    commits = total(samples, "railyard_te_reaction_seconds_count")
    if commits:
        run.commit_s = total(samples, "railyard_te_reaction_seconds_sum") / commits
    run.decisions = read_decisions(decisions, start)


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
