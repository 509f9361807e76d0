"""A plan as the emulation runs it: steady flows as iperf3, every other
transfer on the transfer engine, in emulated units; and what of a workload
it cannot run, refused before a fabric is built.

Apart from runner.py, which brings fabrics and controllers up and down:
this is the arithmetic from the real fabric's rates and sizes to the
emulated one's, which the reports use too.
"""

from __future__ import annotations

import math

from controller.fabric import Fabric
from controller.fabric import addressing as ad
from emulation.net.fabric import EmulatedFabric
from emulation.traffic.iperf import FlowSpec
from emulation.traffic.records import Schedule, Stream
from emulation.traffic.transfers import TransferEngine
from emulation.workload import Workload, WorkloadError
from emulation.workload.expand import Plan, Transfer
from emulation.workload.model import FlowsItem, Item, JobItem, JobMixItem, PatternItem, Window

MAX_EMULATED_S = 600.0


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


def transfer_engine(emu: EmulatedFabric, plan: Plan, scale: float, duration: float) -> TransferEngine:
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
