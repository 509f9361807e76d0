"""Routing held still: how much of the optimum the emulation carries when
every flow of a scenario is pinned where you say, so what is measured is the
emulated datapath and TCP, not TE's reaction.

For each repeat: a fresh fabric, the controller (TE off unless --te-beside),
the scenario's steady flows pinned to the given vias (default: the exact
single-path optimum's, which pairs flows that share their whole path), then
iperf3 judged exactly as a scenario report judges it (fraction of the exact
splittable optimum, first second left out). Beside it: the senders' TCP
retransmits and timeouts, drops at the fabric's queues, and ovs-vswitchd's
CPU. `--vias te` first runs TE (daemon and agent, as a scenario's TE run
does) and pins where it had settled the flows at 60% of that run, read off
the switches (ofproto/trace): the routing TE reaches, without its moves.

    python -m bench.pinned --spec three-tier.yaml --seed 5 --vias te --repeats 2
    python -m bench.pinned --spec three-tier.yaml --seed 5 --queue 24 --no-ack-priority
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from bench import write_result
from bench.calibrate import vswitchd_cpu_seconds
from controller.fabric import DEFAULT_SPEC, Fabric, build_fabric, load_spec
from controller.fabric import addressing as ad
from emulation.agent.telemetry_agent import TelemetryAgent, read_queues
from emulation.net import ovs
from emulation.net.fabric import EmulatedFabric
from emulation.processes.controller_process import ControllerProcess, Ports
from emulation.scenarios.emulable import steady_flows
from emulation.scenarios.judge import judge, phases
from emulation.traffic.iperf import FlowSpec, TrafficRun
from emulation.workload import load_workload, spec_file
from emulation.workload.expand import expand
from emulation.workload.placers import railyard_placer

TCP_COUNTERS = ("RetransSegs", "TCPTimeouts", "TCPLossProbes", "TCPFastRetrans", "OutSegs")


def tcp_counters(emu: EmulatedFabric) -> dict[str, int]:
    """TCP counters summed over every server's namespace (/proc/PID/net is per namespace)."""
    total = dict.fromkeys(TCP_COUNTERS, 0)
    for pid in emu.host_pids.values():
        for name in ("netstat", "snmp"):
            lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()
            for head, values in zip(lines[::2], lines[1::2]):
                for key, value in zip(head.split(":", 1)[1].split(), values.split(":", 1)[1].split()):
                    if key in total:
                        total[key] += int(value)
    return total


def fabric_drops() -> int:
    """Packets dropped so far at the emulated fabric's egress queues (ours: "ry" interfaces)."""
    return sum(drops for dev, (_, drops) in read_queues().items() if dev.startswith(ad.NAME_PREFIX))


def traced_via(fabric: Fabric, flow: FlowSpec) -> str:
    """The via (spine, or core where there are cores) the switches send `flow`
    across now, hop by hop with ofproto/trace: overlay entries included."""
    node, port = fabric.attachment(flow.src)
    via = ""
    for _ in range(8):
        out = ovs.trace_output_port(node, flow.ofproto_flow(port))
        if out is None:
            return via
        link = fabric.ports(node)[out]
        if link.is_access:
            return via
        peer = link.peer(node)
        if peer.node in fabric.vias(flow.src, flow.dst):
            via = peer.node
        node, port = peer.node, peer.port
    return via


def run_once(
    fabric: Fabric, spec_path: Path, flows: list[FlowSpec], vias: list[str] | None, duration: float, te: bool
) -> dict:
    """One fresh fabric. `vias` None: TE runs and nothing is pinned; the
    routing it settled on is returned. Else every flow pinned, TE beside if `te`."""
    with tempfile.TemporaryDirectory(prefix="railyard-pinned-") as tmp:
        return _run_in(Path(tmp), fabric, spec_path, flows, vias, duration, te)


def _run_in(
    workdir: Path,
    fabric: Fabric,
    spec_path: Path,
    flows: list[FlowSpec],
    vias: list[str] | None,
    duration: float,
    te: bool,
) -> dict:
    ports = Ports.pick()
    ctl = ControllerProcess(
        spec_path, workdir / "intent.db", ports, workdir / "controller.log", reconcile_interval_s=2.0, te=te
    )
    agent = None
    with EmulatedFabric(fabric, controller=ports.controller_target) as emu:
        try:
            ctl.start()
            ctl.wait_ready(len(fabric.switches), timeout_s=60)
            if vias is not None:
                with ctl.client() as client:
                    for i, (f, via) in enumerate(zip(flows, vias)):
                        client.pin_flow(
                            f"pinned-{i}", ad.nic_ip(f.src), ad.nic_ip(f.dst), via, "tcp", f.src_port, f.dst_port
                        )
                ctl.wait_reconciles(1)
            if te:
                agent = TelemetryAgent(fabric, f"127.0.0.1:{ports.grpc}").start()
            drops_before = fabric_drops()
            tcp_before, cpu_before, t0 = tcp_counters(emu), vswitchd_cpu_seconds(), time.monotonic()
            run = TrafficRun(emu.popen, flows, duration).start()
            settled = None
            if vias is None:
                time.sleep(0.6 * duration)
                settled = [traced_via(fabric, f) for f in flows]
            results = run.wait(grace_s=5.0)
            cpu = (vswitchd_cpu_seconds() - cpu_before) / (time.monotonic() - t0)
            tcp = {k: v - tcp_before[k] for k, v in tcp_counters(emu).items()}
            drops = fabric_drops() - drops_before
        finally:
            if agent is not None:
                agent.stop()
            ctl.stop()
    judged = judge(phases(fabric, [], duration, flows), results, duration)
    return {
        "fraction_of_optimum": judged.totals.fraction_of_optimum,
        "aggregate_mbps": judged.totals.aggregate_mbps,
        "optimum_mbps": judged.totals.optimum_mbps,
        "flow_goodput_mbps": [f.goodput_bps / 1e6 for f in judged.flows],
        "flow_errors": [r.error for r in results if r.error],
        "drops": drops,
        "tcp": tcp,
        "vswitchd_cpu_ratio": cpu,
        "load_1min": os.getloadavg()[0],
        "settled_vias": settled,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default="three-tier.yaml")
    parser.add_argument("--scenario", default="elephant", help="steady flows only; its events are ignored")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--vias", default="optimum", help="optimum | te | comma-separated, one per flow")
    parser.add_argument("--te-beside", action="store_true", help="run TE and the agent beside the pins")
    parser.add_argument("--rate", type=float, help="override rates.emulated_nic_mbps")
    parser.add_argument("--queue", type=int, help="override emulation.queue_packets")
    parser.add_argument("--ack-priority", action=argparse.BooleanOptionalAction, help="override the spec's")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", default="bench/results/pinned.json")
    args = parser.parse_args()
    ovs.check_running()
    scenario = load_workload(args.scenario)
    spec_path = Path(spec_file(scenario, args.spec) or DEFAULT_SPEC)
    spec = load_spec(spec_path)
    emulation = spec.emulation
    if args.queue is not None:
        emulation = dataclasses.replace(emulation, queue_packets=args.queue)
    if args.ack_priority is not None:
        emulation = dataclasses.replace(emulation, ack_priority=args.ack_priority)
    rates = spec.rates if args.rate is None else dataclasses.replace(spec.rates, emulated_nic_mbps=args.rate)
    # The controller reads the shipped spec: it plans in the real fabric's
    # units, which these overrides leave alone.
    fabric = build_fabric(dataclasses.replace(spec, emulation=emulation, rates=rates))
    flows = steady_flows(fabric, expand(fabric, scenario, args.seed, railyard_placer(fabric)), args.duration)
    setup = {
        "spec": spec.name,
        "scenario": scenario.name,
        "seed": args.seed,
        "emulated_nic_mbps": rates.emulated_nic_mbps,
        "queue_packets": emulation.queue_packets,
        "ack_priority": emulation.ack_priority,
        "te_beside": args.te_beside,
    }
    te_run = None
    if args.vias == "optimum":
        single = phases(fabric, [], args.duration, flows)[0].bounds.single_path
        if single is None:
            raise SystemExit("the single-path optimum is unknown for these flows: give --vias")
        vias = list(single.vias)
    elif args.vias == "te":
        te_run = run_once(fabric, spec_path, flows, None, args.duration, te=True)
        vias = te_run["settled_vias"]
        print(json.dumps({"te_run": {k: v for k, v in te_run.items() if k != "flow_goodput_mbps"}}), flush=True)
    else:
        vias = args.vias.split(",")
        if len(vias) != len(flows):
            raise SystemExit(f"--vias: {len(vias)} given, {len(flows)} flows")
    runs = []
    for _ in range(args.repeats):
        runs.append(run_once(fabric, spec_path, flows, vias, args.duration, te=args.te_beside))
        print(json.dumps({**setup, **{k: v for k, v in runs[-1].items() if k != "flow_goodput_mbps"}}), flush=True)
    result = {"benchmark": "pinned", "host": platform.node(), **setup, "vias": vias, "te_run": te_run, "runs": runs}
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    main()
