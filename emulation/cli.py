"""`railyard fabric | demo | scenario | simulate | observe`: the emulation's
command-line front end, joined to `railyard` through an entry point."""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

from controller.cli.output import CliError, emit, writable_dir
from controller.fabric import Tier, load_fabric
from controller.fabric import addressing as ad

SPEC_HELP = "fabric spec: a YAML path or a shipped spec's name (default: the demo spec)"


def fabric_show(args) -> int:
    fabric = load_fabric(args.spec)
    spec = fabric.spec
    tiers = {tier.value: fabric.switches_in(tier) for tier in Tier if fabric.switches_in(tier)}
    nics = [
        {
            "nic": ad.nic_name(nic),
            "address": ad.nic_ip(nic),
            "mac": ad.nic_mac(nic),
            "leaf": fabric.attachment(nic).node,
            "port": fabric.attachment(nic).port,
        }
        for nic in (fabric.nics if args.addresses else ())
    ]
    data = {
        "name": spec.name,
        "kind": spec.kind.value,
        "gpus": fabric.gpu_count,
        "servers": len(fabric.servers),
        "switches": {tier: len(switches) for tier, switches in tiers.items()},
        "links": len(fabric.links),
        **({"nics": nics} if args.addresses else {}),
    }

    def text() -> None:
        print(
            f"fabric {spec.name}: {spec.kind.value}, {fabric.gpu_count} NICs/GPUs, {len(fabric.switches)} switches, "
            f"{len(fabric.links)} links"
        )
        for tier, switches in tiers.items():
            print(f"  {tier:6s} {len(switches):5d}  e.g. {switches[0].name} dpid {ad.dpid_hex(switches[0].dpid)}")
        if nics:
            print(f"  {'NIC':14s} {'address':12s} {'MAC':18s} leaf:port")
            for n in nics:
                print(f"  {n['nic']:14s} {n['address']:12s} {n['mac']:18s} {n['leaf']}:{n['port']}")

    emit(args.json, data, text)
    return 0


def fabric_up(args) -> int:
    from emulation.net import ovs
    from emulation.net.fabric import EmulatedFabric, sflow_sampling

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
    from emulation.net.cleanup import teardown, teardown_from_state
    from emulation.net.fabric import STATE_DIR

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
    bridges = sorted(set(removed))
    emit(
        args.json,
        {"removed_bridges": bridges},
        lambda: print(f"removed {len(bridges)} Railyard bridges" + (f": {' '.join(bridges)}" if bridges else "")),
    )
    return 0


def fabric_status(args) -> int:
    from emulation.net import ovs
    from emulation.net.fabric import STATE_DIR

    bridges = sorted(ovs.railyard_bridges())
    states = [json.loads(p.read_text()) for p in sorted(STATE_DIR.glob("fabric-*.json"))] if STATE_DIR.exists() else []
    fabrics = [
        {"fabric": s["fabric"], "owner_pid": s["pid"], "servers": len(s["hosts"]), "controller": s["controller"]}
        for s in states
    ]

    def text() -> None:
        for f in fabrics:
            owner = f"owner pid {f['owner_pid']}"
            print(f"fabric {f['fabric']}: {owner}, {f['servers']} servers, controller {f['controller']}")
        print(f"{len(bridges)} Railyard bridges" + (f": {' '.join(bridges)}" if bridges else ""))

    emit(args.json, {"fabrics": fabrics, "bridges": bridges}, text)
    return 0


def demo(args) -> int:
    args.name = "elephant"
    return scenario_run(args)


def scenario_list(args) -> int:
    from emulation.workload import available, load_workload

    rows = [{"name": name, "description": load_workload(name).description} for name in available()]

    def text() -> None:
        for row in rows:
            print(f"{row['name']:20} {row['description']}")

    emit(args.json, rows, text)
    return 0


def needs_sim_extra(command: str) -> None:
    """The simulator and the reports need scipy (the optimum) and matplotlib
    (plots), which the daemon does not: they come with the `sim` extra."""
    import importlib.util

    missing = [m for m in ("scipy", "matplotlib") if importlib.util.find_spec(m) is None]
    if missing:
        raise CliError(
            command, f"needs {' and '.join(missing)}, not installed", "pip install 'railyard[sim]' (the sim extra)"
        )


def scenario_run(args) -> int:
    needs_sim_extra("scenario run")
    from emulation.net import ovs
    from emulation.scenarios.judge import RunInvalid
    from emulation.scenarios.output import report_stem, write
    from emulation.scenarios.report import build_report
    from emulation.scenarios.runner import Sources, check_emulable, run_scenario
    from emulation.scenarios.table import table
    from emulation.workload import load_workload, spec_file
    from emulation.workload.events import check_events

    workload = load_workload(args.name)
    sources = Sources(args.telemetry, args.underlay)
    spec_path = spec_file(workload, args.spec)
    fabric = load_fabric(spec_path)
    workload = check_events(workload, fabric)  # before any fabric is built
    check_emulable(workload)
    out = writable_dir(args.out, "out")  # before the run, not after it
    ovs.check_running()
    started = time.monotonic()
    live = sys.stderr.isatty()

    def progress(text: str) -> None:
        if live:
            print(f"\r{text}   ", end="", file=sys.stderr, flush=True)

    stem = report_stem(workload.name, fabric.spec.name, args.seed, sources.telemetry, sources.underlay)
    raw_dir = out / f"{stem}-iperf3" if args.keep_raw else None
    runs = run_scenario(fabric, spec_path, workload, args.seed, progress, raw_dir, sources)
    if live:
        print(file=sys.stderr)
    try:
        report = build_report(fabric, workload, args.seed, runs, sources)
    except RunInvalid as exc:  # a bug: keep the evidence, then fail
        if exc.report is not None:
            print(f"report kept for inspection: {write(exc.report, runs, fabric, out)}", file=sys.stderr)
        raise
    path = write(report, runs, fabric, out)

    def text() -> None:
        print(table(report))
        print(
            f"\nreport: {path} (plots: {path.with_suffix('.png')}; controller log beside them); "
            f"{time.monotonic() - started:.0f} s"
        )

    emit(args.json, report, text)
    return 0


def simulate(args) -> int:
    """The flow-level what-if simulator: no Mininet, no root, the real engine."""
    needs_sim_extra("simulate")
    import gc

    from emulation.simulate.output import write
    from emulation.simulate.report import table
    from emulation.simulate.run import simulate as run_simulation
    from emulation.workload import WorkloadError, load_workload, spec_file

    if args.duration is not None and not 0 < args.duration <= 3600:
        raise WorkloadError("--duration", f"got {args.duration:g}", "more than 0 and at most 3600 seconds")
    workload = load_workload(args.workload)
    fabric = load_fabric(spec_file(workload, args.spec))  # --spec, else the scenario's own, else the demo
    out = writable_dir(args.out, "out")  # before the run, not after it
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
    try:
        path = write(result, out)
    except OSError as exc:
        raise CliError("--out", f"cannot write into {out}: {exc.strerror or exc}", "a writable directory") from None

    def text() -> None:
        print(table(result))
        print(f"\nresult: {path} (plot: {path.with_suffix('.png')}); {time.monotonic() - started:.1f} s")

    emit(args.json, result, text)
    return 0


def observe(args) -> int:
    from emulation.processes.prometheus_local import DEPLOY, LocalPrometheus

    if not (DEPLOY / "alerts.yml").is_file():
        raise CliError(
            "observe",
            f"needs Railyard's scrape config and alert rules, which are not at {DEPLOY} (an installed wheel "
            "does not carry deploy/)",
            "run it from a clone of the repository, or point your own Prometheus at the controller with "
            "deploy/prometheus/alerts.yml (docs/metrics.md)",
        )
    if shutil.which("prometheus") is None:
        raise CliError("observe", "needs the prometheus binary on PATH", "apt-get install prometheus")
    data = writable_dir(args.data, "data")
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


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


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
    fsub = fabric.add_subparsers(dest="fabric_cmd", required=True, metavar="COMMAND")
    show = fsub.add_parser("show", help="print the fabric model a spec describes")
    show.add_argument("--spec", help=SPEC_HELP)
    show.add_argument("--addresses", action="store_true", help="list every NIC's address, MAC and leaf port")
    show.set_defaults(func=fabric_show)
    up = fsub.add_parser("up", help="build the emulated fabric with its ECMP underlay; runs until Ctrl-C")
    up.add_argument("--spec", help=SPEC_HELP)
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
    up.set_defaults(func=fabric_up)
    down = fsub.add_parser("down", help="remove Railyard's bridges, namespaces and processes (only those)")
    down.add_argument("--name", help="only the fabric with this name")
    down.set_defaults(func=fabric_down)
    status = fsub.add_parser("status", help="list running Railyard fabrics and bridges")
    status.set_defaults(func=fabric_status)
    for parser in (show, down, status):
        _json_flag(parser)

    demo_parser = sub.add_parser("demo", help="the elephant scenario: ECMP, then Railyard TE, against the optimum")
    demo_parser.add_argument("--spec", help=SPEC_HELP)
    demo_parser.add_argument("--seed", type=int, default=3, help="seed for the elephants' source ports (3 collides)")
    demo_parser.add_argument("--out", default="reports", help="directory for the report")
    demo_parser.add_argument("--keep-raw", action="store_true", help="keep iperf3's own JSON reports under --out")
    _source_arguments(demo_parser)
    demo_parser.set_defaults(func=demo)

    scenarios = sub.add_parser("scenario", help="run a traffic scenario twice (ECMP, then Railyard TE) and report")
    ssub = scenarios.add_subparsers(dest="scenario_cmd", required=True, metavar="COMMAND")
    srun = ssub.add_parser("run", help="bring up the fabric, run the scenario on ECMP then with TE, tear down")
    srun.add_argument("name", help="a shipped scenario (see `railyard scenario list`) or a YAML path")
    srun.add_argument("--spec", help=SPEC_HELP + "; overrides the scenario's own")
    srun.add_argument("--seed", type=int, default=1, help="seeds source ports, job draws and noise (default 1)")
    srun.add_argument("--out", default="reports", help="directory for the JSON report and PNG plots")
    srun.add_argument("--keep-raw", action="store_true", help="keep iperf3's own JSON reports under --out")
    _source_arguments(srun)
    srun.set_defaults(func=scenario_run)
    slist = ssub.add_parser("list", help="the shipped scenarios")
    slist.set_defaults(func=scenario_list)
    for parser in (demo_parser, srun, slist):
        _json_flag(parser)

    sim = sub.add_parser(
        "simulate",
        help="flow-level what-if: a scenario on any spec, its placements and routings vs the real TE engine, "
        "against the optimum",
    )
    sim.add_argument(
        "--spec",
        help="fabric spec: a YAML path or a shipped spec's name (default: the scenario's own, else the demo spec)",
    )
    sim.add_argument(
        "--workload",
        required=True,
        help="a shipped scenario (elephant, incast-8, job-mix, training-mix-large, ...) or a YAML path",
    )
    sim.add_argument("--seed", type=int, default=1, help="seeds source ports (the ECMP hash), job draws and noise")
    sim.add_argument("--duration", type=float, help="simulated seconds (default: the workload's duration_s)")
    sim.add_argument("--out", default="reports", help="directory for the JSON result and the PNG")
    sim.set_defaults(func=simulate)
    _json_flag(sim)

    prometheus = sub.add_parser(
        "observe",
        help="run a local Prometheus (with Railyard's alert rules) scraping a controller; from a source checkout",
    )
    prometheus.add_argument("--metrics", default="127.0.0.1:8653", help="the controller's metrics HOST:PORT")
    prometheus.add_argument("--port", type=int, default=9090, help="Prometheus listen port on 127.0.0.1")
    prometheus.add_argument("--data", default=".state/prometheus", help="Prometheus data directory")
    prometheus.set_defaults(func=observe)
