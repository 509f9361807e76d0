"""`railyard fabric ...` and `railyard scenario ...`: the emulation's command-line front end."""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from pathlib import Path

from controller.fabric import Tier, load_fabric
from controller.fabric import addressing as ad
from emulation.net import ovs
from emulation.net.cleanup import teardown, teardown_from_state
from emulation.net.fabric import STATE_DIR, EmulatedFabric, sflow_sampling


def fabric_show(args) -> int:
    fabric = load_fabric(args.spec)
    spec = fabric.spec
    print(
        f"fabric {spec.name}: {spec.kind.value}, {fabric.gpu_count} NICs/GPUs, {len(fabric.switches)} switches, "
        f"{len(fabric.links)} links"
    )
    for tier in Tier:
        switches = fabric.switches_in(tier)
        if switches:
            print(f"  {tier.value:6s} {len(switches):5d}  e.g. {switches[0].name} dpid {ad.dpid_hex(switches[0].dpid)}")
    if args.addresses:
        print(f"  {'NIC':14s} {'address':12s} {'MAC':18s} leaf:port")
        for nic in fabric.nics:
            end = fabric.attachment(nic)
            print(f"  {ad.nic_name(nic):14s} {ad.nic_ip(nic):12s} {ad.nic_mac(nic):18s} {end.node}:{end.port}")
    return 0


def fabric_up(args) -> int:
    fabric = load_fabric(args.spec)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    started = time.monotonic()
    tls_dir = Path(args.tls) if args.tls else None
    sflow = None
    if args.sflow:
        sampling = args.sflow_sampling or sflow_sampling(fabric)
        sflow = ovs.SflowExport(args.sflow, sampling, args.sflow_polling)
    with EmulatedFabric(fabric, controller=args.controller, tls_dir=tls_dir, bare=args.bare, sflow=sflow) as emu:
        print(
            f"fabric {fabric.spec.name} up in {time.monotonic() - started:.1f} s: "
            f"{len(fabric.switches)} switches, {len(fabric.servers)} servers, {fabric.gpu_count} NICs; "
            f"controller {emu.controller}; state {emu.state_file}"
            + ("; bare: no underlay (`railyard controller run --underlay` installs it)" if args.bare else "")
            + (f"; sFlow to {sflow.target}, 1 in {sflow.sampling} packets" if sflow else ""),
            flush=True,
        )
        if args.cli:
            from mininet.cli import CLI

            CLI(emu.net)
        else:
            print("Ctrl-C (or `railyard fabric down`) to tear down", flush=True)
            stop.wait()
    print("fabric down", flush=True)
    return 0


def fabric_down(args) -> int:
    states = sorted(STATE_DIR.glob("fabric-*.json")) if STATE_DIR.exists() else []
    if args.name:
        states = [p for p in states if p.name == f"fabric-{args.name}.json"]
    removed = []
    for path in states:
        report = teardown_from_state(path)
        removed += report.bridges
    # Sweep bridges of a fabric whose owner died before writing its state file.
    leftovers = teardown(fabric_name=args.name)
    removed += leftovers.bridges
    print(f"removed {len(set(removed))} Railyard bridges" + (f": {' '.join(sorted(set(removed)))}" if removed else ""))
    return 0


def fabric_status(args) -> int:
    bridges = ovs.railyard_bridges()
    states = sorted(STATE_DIR.glob("fabric-*.json")) if STATE_DIR.exists() else []
    for path in states:
        state = json.loads(path.read_text())
        print(
            f"fabric {state['fabric']}: owner pid {state['pid']}, {len(state['hosts'])} servers, "
            f"controller {state['controller']}"
        )
    print(f"{len(bridges)} Railyard bridges" + (f": {' '.join(sorted(bridges))}" if bridges else ""))
    return 0


def main_fabric(args) -> int:
    return {"show": fabric_show, "up": fabric_up, "down": fabric_down, "status": fabric_status}[args.fabric_cmd](args)


def demo(args) -> int:
    args.scenario_cmd, args.name = "run", "elephant"
    return scenario(args)


def scenario(args) -> int:
    from emulation.scenarios.judge import RunInvalid
    from emulation.scenarios.output import report_stem, write
    from emulation.scenarios.report import build_report
    from emulation.scenarios.runner import Sources, check_emulable, run_scenario
    from emulation.scenarios.table import table
    from emulation.workload import available, load_workload, spec_file
    from emulation.workload.events import check_events

    if args.scenario_cmd == "list":
        for name in available():
            print(f"{name:20} {load_workload(name).description}")
        return 0
    workload = load_workload(args.name)
    sources = Sources(args.telemetry, args.underlay)
    spec_path = spec_file(workload, args.spec)
    fabric = load_fabric(spec_path)
    workload = check_events(workload, fabric)  # before any fabric is built
    check_emulable(workload)
    ovs.check_running()
    started = time.monotonic()

    def progress(text: str) -> None:
        print(f"\r{text}   ", end="", flush=True)

    stem = report_stem(workload.name, fabric.spec.name, args.seed, sources.telemetry, sources.underlay)
    raw_dir = Path(args.out) / f"{stem}-iperf3" if args.keep_raw else None
    runs = run_scenario(fabric, spec_path, workload, args.seed, progress, raw_dir, sources)
    print()
    try:
        report = build_report(fabric, workload, args.seed, runs, sources)
    except RunInvalid as exc:  # a bug: keep the evidence, then fail
        if exc.report is not None:
            print(f"report kept for inspection: {write(exc.report, runs, fabric, Path(args.out))}")
        raise
    path = write(report, runs, fabric, Path(args.out))
    print(table(report))
    print(
        f"\nreport: {path} (plots: {path.with_suffix('.png')}; controller log beside them); "
        f"{time.monotonic() - started:.0f} s"
    )
    return 0


def simulate(args) -> int:
    """The flow-level what-if simulator: no Mininet, no root, the real engine."""
    import gc
    import sys

    from emulation.simulate.output import write
    from emulation.simulate.report import table
    from emulation.simulate.run import simulate as run_simulation
    from emulation.workload import WorkloadError, load_workload, spec_file

    if args.duration is not None and not 0 < args.duration <= 3600:
        raise WorkloadError("--duration", f"got {args.duration:g}", "more than 0 and at most 3600 seconds")
    workload = load_workload(args.workload)
    fabric = load_fabric(spec_file(workload, args.spec))  # --spec, else the scenario's own, else the demo
    gc.freeze()  # the fabric's objects are here to stay: keep them out of every collection
    started = time.monotonic()
    width = 30

    # A progress line redrawn in place is for a terminal; a log or a pipe gets the result only.
    live = sys.stderr.isatty()

    def notify(text: str) -> None:
        if live:
            print(f"\r{text:<72.72s}", end="", file=sys.stderr, flush=True)

    def progress(t: float, total: float, cycle) -> None:
        if not live:
            return
        done = int(width * t / total) if total else width
        bar = "=" * done + ">" * (done < width) + " " * (width - done - 1)
        print(
            f"\r[{bar}] {t:6.1f}/{total:g} s  TE {cycle.aggregate_bps / 1e9:9.0f} Gb/s  "
            f"reroutes {cycle.reroutes:5d}  step {cycle.step_s * 1e3:6.0f} ms ",
            end="",
            file=sys.stderr,
            flush=True,
        )

    try:
        result = run_simulation(fabric, workload, args.seed, args.duration, progress, notify=notify)
    except BaseException:
        if live:
            print(f"\r{'':100s}\r", end="", file=sys.stderr)  # the error gets a line of its own
        raise
    if live:
        print(file=sys.stderr)
    path = write(result, Path(args.out))
    print(table(result))
    print(f"\nresult: {path} (plot: {path.with_suffix('.png')}); {time.monotonic() - started:.1f} s")
    return 0


def observe(args) -> int:
    from emulation.processes.prometheus_local import LocalPrometheus

    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    prometheus = LocalPrometheus([args.metrics], args.port, scrape_interval_s=5.0, workdir=data).start()
    print(f"Prometheus at {prometheus.url} scraping {args.metrics} (alerts: {prometheus.url}/alerts); Ctrl-C stops it")
    assert prometheus.proc is not None  # start() returned: the process is running
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1.0) and prometheus.proc.poll() is None:
            pass
    except KeyboardInterrupt:
        pass
    finally:
        prometheus.stop()
    return 0


def _source_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--telemetry",
        choices=("agent", "sflow", "openflow"),
        default="agent",
        help="TE's telemetry: the emulation's agent process (default), the switches' own sFlow agents, or the "
        "controller's OpenFlow port statistics (sflow and openflow start no agent process)",
    )
    parser.add_argument(
        "--underlay",
        choices=("fabric", "controller"),
        default="fabric",
        help="who installs the ECMP underlay: the emulation (default), or the controller (`--underlay`) on a "
        "fabric brought up bare, in both runs",
    )


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `railyard.commands` entry point: fabric, demo, scenario, simulate, observe."""
    fabric = sub.add_parser("fabric", help="the emulated fabric (Mininet + Open vSwitch)")
    fabric.set_defaults(run=main_fabric)
    fsub = fabric.add_subparsers(dest="fabric_cmd", required=True)
    show = fsub.add_parser("show", help="print the fabric model a spec describes")
    show.add_argument("--spec", help="fabric spec YAML (default: the shipped demo spec)")
    show.add_argument("--addresses", action="store_true", help="list every NIC's address, MAC and leaf port")
    up = fsub.add_parser("up", help="build the emulated fabric with its ECMP underlay; runs until Ctrl-C")
    up.add_argument("--spec", help="fabric spec YAML (default: the shipped demo spec)")
    up.add_argument("--controller", help="OpenFlow controller target, e.g. tcp:127.0.0.1:6653 (default: from spec)")
    up.add_argument(
        "--tls",
        metavar="DIR",
        help="connect over TLS with DIR/switch.crt, switch.key and ca.crt (from `railyard certs init`)",
    )
    up.add_argument("--cli", action="store_true", help="open the Mininet CLI instead of waiting for a signal")
    up.add_argument(
        "--bare", action="store_true", help="install no underlay: the controller does (controller run --underlay)"
    )
    up.add_argument(
        "--sflow",
        metavar="HOST:PORT",
        help="enable Open vSwitch's own sFlow agent on every bridge, exporting to HOST:PORT (the controller's "
        "--sflow-listen)",
    )
    up.add_argument(
        "--sflow-sampling",
        type=int,
        help="sample 1 in N packets (default: about 100 samples a second of a flow at the emulated NIC rate)",
    )
    up.add_argument("--sflow-polling", type=int, default=1, help="seconds between port counter samples (default 1)")
    down = fsub.add_parser("down", help="remove Railyard's bridges, namespaces and processes (only those)")
    down.add_argument("--name", help="only the fabric with this name")
    fsub.add_parser("status", help="list running Railyard fabrics and bridges")

    demo_parser = sub.add_parser("demo", help="the elephant scenario: ECMP, then Railyard TE, against the optimum")
    demo_parser.set_defaults(run=demo)
    demo_parser.add_argument("--spec", help="fabric spec YAML (default: the shipped demo spec)")
    demo_parser.add_argument("--seed", type=int, default=3, help="seed for the elephants' source ports (3 collides)")
    demo_parser.add_argument("--out", default="reports", help="directory for the report")
    demo_parser.add_argument("--keep-raw", action="store_true", help="keep iperf3's own JSON reports under --out")
    _source_arguments(demo_parser)

    scenarios = sub.add_parser("scenario", help="run a traffic scenario twice (ECMP, then Railyard TE) and report")
    scenarios.set_defaults(run=scenario)
    ssub = scenarios.add_subparsers(dest="scenario_cmd", required=True)
    srun = ssub.add_parser("run", help="bring up the fabric, run the scenario on ECMP then with TE, tear down")
    srun.add_argument("name", help="a shipped scenario (see `railyard scenario list`) or a YAML path")
    srun.add_argument("--spec", help="fabric spec YAML (default: the shipped demo spec)")
    srun.add_argument("--seed", type=int, default=1)
    srun.add_argument("--out", default="reports", help="directory for the JSON report and PNG plots")
    srun.add_argument("--keep-raw", action="store_true", help="keep iperf3's own JSON reports under --out")
    _source_arguments(srun)
    ssub.add_parser("list", help="the shipped scenarios")

    sim = sub.add_parser(
        "simulate",
        help="flow-level what-if: a scenario on any spec, its placements and routings vs the real TE engine, "
        "against the optimum",
    )
    sim.set_defaults(run=simulate)
    sim.add_argument(
        "--spec",
        help="fabric spec YAML, or a shipped spec's file name (default: the scenario's own fabric, else the demo spec)",
    )
    sim.add_argument(
        "--workload",
        required=True,
        help="a shipped scenario (elephant, incast-8, job-mix, training-mix-large, ...) or a YAML path",
    )
    sim.add_argument("--seed", type=int, default=1, help="seeds source ports (the ECMP hash), job draws and noise")
    sim.add_argument("--duration", type=float, help="simulated seconds (default: the workload's duration_s)")
    sim.add_argument("--out", default="reports", help="directory for the JSON result and the PNG")

    prometheus = sub.add_parser(
        "observe", help="run a local Prometheus (with Railyard's alert rules) scraping a controller"
    )
    prometheus.set_defaults(run=observe)
    prometheus.add_argument("--metrics", default="127.0.0.1:9302", help="the controller's metrics HOST:PORT")
    prometheus.add_argument("--port", type=int, default=9090, help="Prometheus listen port on 127.0.0.1")
    prometheus.add_argument("--data", default=".state/prometheus", help="Prometheus data directory")
