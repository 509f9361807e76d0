"""`railyard scenario run`: the same scenario, same seed, twice in one
invocation — underlay ECMP only, then with Railyard TE — each on a fresh
fabric with the real controller daemon and telemetry agent, then the report.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from controller.fabric import Endpoint, Fabric
from controller.fabric import addressing as ad
from controller.metrics import TE_DECISIONS
from controller.southbound.overlay import is_railyard_meter
from controller.te.jobs import JobRequest, Pattern
from controller.te.placement import FabricState, place
from emulation.agent.telemetry_agent import FabricSampler, TelemetryAgent, read_queues
from emulation.model.pairs import BYSTANDER_PORT, incast_pairs, permutation_pairs
from emulation.net import netns, ovs
from emulation.net.fabric import EmulatedFabric
from emulation.processes.controller_process import ControllerProcess, Ports, total
from emulation.scenarios.spec import Scenario, ScenarioError, check_events
from emulation.scenarios.timeline import LoggedDecision, parse_decisions
from emulation.traffic.iperf import FlowResult, FlowSpec, TrafficRun, make_flows

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 0.25
MODES = ("ecmp", "te")


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since traffic start
    tx_bps: dict[Endpoint, float]  # per switch egress, emulated units
    queue_bytes: dict[Endpoint, int]


@dataclass
class ModeRun:
    mode: str
    flows: list[FlowSpec]
    results: list[FlowResult] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    drops: int = 0  # at switch egress queues
    policed: int = 0  # by Railyard's meters at sending leaves
    te_decisions: dict[str, float] = field(default_factory=dict)
    decisions: list[LoggedDecision] = field(default_factory=list)  # from the controller's log, since traffic start
    # Mean decision -> bundle committed, from the controller's histogram (it
    # exports no per-decision commit time); None when nothing was committed.
    commit_s: float | None = None
    flow_mods: float = 0.0
    controller_log: str = ""  # the TE run's daemon log: every decision, with its reason


def scenario_flows(fabric: Fabric, scenario: Scenario, seed: int, client=None) -> list[FlowSpec]:
    """The flows of a scenario. Job scenarios place the job through the API when
    a client is given (TE run), else with the same pure placement in-process
    (ECMP run: no controller at all, so nothing steers the job's flows)."""
    rate = fabric.spec.rates.emulated_nic_mbps * 1e6
    if scenario.pattern == "permutation":
        return make_flows(permutation_pairs(fabric, ScenarioError), scenario.protocol, seed=seed, rate_bps=rate)
    if scenario.pattern == "incast":
        senders, bystander = incast_pairs(fabric, scenario.fan_in, seed, ScenarioError)
        flows = [
            replace(f, start_s=scenario.incast_start_s)
            for f in make_flows(senders, scenario.protocol, seed=seed, rate_bps=rate)
        ]
        if scenario.bystander and bystander:
            (extra,) = make_flows([bystander], "tcp", seed=seed + 1)
            flows.append(FlowSpec(extra.src, extra.dst, "tcp", extra.src_port, BYSTANDER_PORT))
        return flows
    if client is not None:
        job = client.place_job(f"{scenario.name}-job", fabric.gpu_count, scenario.collective, flow_gbps=100.0).job
        pairs = [(ad.parse_nic_address(f.src_address), ad.parse_nic_address(f.dst_address)) for f in job.flows]
    else:
        request = JobRequest(f"{scenario.name}-job", fabric.gpu_count, Pattern(scenario.collective), 100.0)
        pairs = [(f.src, f.dst) for f in place(fabric, FabricState(), request, now=0.0).flows]
    return make_flows(pairs, scenario.protocol, seed=seed, rate_bps=rate)


def _sampler(fabric: Fabric, start: float, stop: threading.Event, out: list[Sample]) -> None:
    """Transmit rate and queue per egress, read the way the telemetry agent reads
    them (kernel counters and tc, one pass), independently of the controller."""
    sampler = FabricSampler(fabric)
    before, then = sampler.ports_now(), time.time()
    while not stop.wait(SAMPLE_INTERVAL_S):
        now_counters, now = sampler.ports_now(), time.time()
        dt = max(now - then, 1e-3)
        tx = {e: max(c.tx_bytes - before[e].tx_bytes, 0) * 8 / dt for e, c in now_counters.items() if e in before}
        out.append(Sample(now - start, tx, {e: c.queue_bytes for e, c in now_counters.items()}))
        before, then = now_counters, now


def _drops() -> int:
    return sum(drops for dev, (_, drops) in read_queues().items() if dev.startswith("ry"))


def _policed(fabric: Fabric) -> int:
    """Packets Railyard's meters dropped at the sending leaves (a TE run's
    meters are still in place here: they outlive the incast by seconds)."""
    return sum(
        n
        for switch in fabric.switches
        for meter_id, n in ovs.meter_band_packets(switch).items()
        if is_railyard_meter(meter_id)
    )


def run_mode(
    fabric: Fabric,
    spec_path,
    scenario: Scenario,
    seed: int,
    mode: str,
    workdir: Path,
    progress: Callable[[str], None],
    raw_dir: Path | None = None,
) -> ModeRun:
    """ECMP: the fabric alone (its underlay), no controller. TE: the daemon and
    the telemetry agent attached, placement through the API."""
    te = mode == "te"
    ports = Ports.pick()
    ctl = ControllerProcess(
        spec_path, workdir / f"{mode}.db", ports, workdir / f"controller-{mode}.log", reconcile_interval_s=2.0
    )
    run = None
    with EmulatedFabric(fabric, controller=ports.controller_target) as emu:
        agent = None
        try:
            if te:
                ctl.start()
                ctl.wait_ready(len(fabric.switches), timeout_s=60)
                agent = TelemetryAgent(fabric, f"127.0.0.1:{ports.grpc}").start()
                with ctl.client() as client:
                    flows = scenario_flows(fabric, scenario, seed, client)
            else:
                flows = scenario_flows(fabric, scenario, seed)
            run = ModeRun(mode, flows)
            drops_before = _drops()
            stop = threading.Event()
            traffic = TrafficRun(emu.popen, flows, scenario.duration_s, raw_dir).start()
            start = time.time()
            sampler = threading.Thread(target=_sampler, args=(fabric, start, stop, run.samples), daemon=True)
            sampler.start()
            for event in scenario.events:
                threading.Timer(event.at_s, _link_down, args=(fabric, event.link)).start()
            # Bounded: a flow whose path died may never finish on its own.
            while time.time() - start < scenario.duration_s + 1 and any(p.poll() is None for p in traffic.clients):
                time.sleep(1.0)
                progress(
                    f"{scenario.name} [{mode}] {min(time.time() - start, scenario.duration_s):4.1f}"
                    f"/{scenario.duration_s:g} s"
                )
            run.results = traffic.wait(grace_s=5.0)
            stop.set()
            sampler.join(timeout=5)
            run.drops = _drops() - drops_before
            run.policed = _policed(fabric)
            if not te:
                return run
            assert agent is not None  # started above whenever te is on
            agent.stop()
            samples = ctl.metrics()
            run.te_decisions = {k: total(samples, "railyard_te_decisions_total", kind=k) for k in TE_DECISIONS}
            run.flow_mods = total(samples, "railyard_flow_mods_total")
            commits = total(samples, "railyard_te_reaction_seconds_count")
            if commits:
                run.commit_s = total(samples, "railyard_te_reaction_seconds_sum") / commits
            run.decisions = parse_decisions((workdir / f"controller-{mode}.log").read_text(errors="replace"), start)
        finally:
            if agent is not None:
                agent.stop()
            ctl.stop()
            if te and run is not None:
                run.controller_log = (workdir / f"controller-{mode}.log").read_text(errors="replace")
    return run


def _link_down(fabric: Fabric, link: str) -> None:
    switch, _, port = link.rpartition(":")
    fabric.ports(switch)[int(port)]  # validates
    netns.run(None, ["ip", "link", "set", ad.switch_port_name(switch, int(port)), "down"])
    log.info("scenario: %s down", link)


def run_scenario(
    fabric: Fabric,
    spec_path,
    scenario: Scenario,
    seed: int,
    progress: Callable[[str], None] = lambda _: None,
    raw_dir: Path | None = None,
) -> dict[str, ModeRun]:
    """`raw_dir`: keep iperf3's own JSON reports there, one folder per mode."""
    scenario = check_events(scenario, fabric.spec)  # a link event that is no uplink stops here, before Mininet
    with tempfile.TemporaryDirectory(prefix="railyard-scenario-") as tmp:
        return {
            mode: run_mode(
                fabric, spec_path, scenario, seed, mode, Path(tmp), progress, raw_dir / mode if raw_dir else None
            )
            for mode in MODES
        }
