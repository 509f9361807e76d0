"""`railyard demo | scenario run | scenario list`: a scenario on the emulated
fabric, on ECMP and then with Railyard TE, and its report."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from controller.cli.output import emit, writable_dir
from controller.fabric import load_fabric
from emulation.cli.common import SPEC_HELP, json_flag, needs_sim_extra, source_arguments

if TYPE_CHECKING:  # the CLI imports the emulation's modules when a command runs, not at start
    from controller.fabric import Fabric
    from emulation.scenarios.records import ScenarioReport
    from emulation.workload import Workload


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


def scenario_run(args) -> int:
    needs_sim_extra("scenario run")
    from emulation.net import ovs
    from emulation.scenarios.emulable import check_emulable
    from emulation.scenarios.judge import RunInvalid
    from emulation.scenarios.output import report_stem, write
    from emulation.scenarios.report import build_report
    from emulation.scenarios.runner import Sources, run_scenario
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
    report = with_ecmp_control(report, fabric, workload, args.seed)
    path = write(report, runs, fabric, out)

    def text() -> None:
        print(table(report))
        print(
            f"\nreport: {path} (plots: {path.with_suffix('.png')}; controller log beside them); "
            f"{time.monotonic() - started:.0f} s"
        )

    emit(args.json, report.as_json(), text)
    return 0


def with_ecmp_control(report: ScenarioReport, fabric: Fabric, workload: Workload, seed: int) -> ScenarioReport:
    """The report with its ECMP run held against the simulator's, same flows
    and hash (emulation/scenarios/control.py): a run the machine fell short
    in says so. The simulation takes 0.1-2 s on an emulable scenario."""
    from dataclasses import replace

    from emulation.scenarios.control import ecmp_control
    from emulation.simulate.run import simulate

    ecmp = report.modes.get("ecmp")
    if ecmp is None:
        return report
    simulated = simulate(fabric, workload, seed).goodput_phases
    control = ecmp_control(ecmp, [(p.start_s, p.ecmp.fraction_of_optimum) for p in simulated])
    return replace(report, ecmp_against_simulator=control)


def _run_arguments(parser: argparse.ArgumentParser, spec_help: str, seed: int, seed_help: str) -> None:
    """What `demo` and `scenario run` share: the fabric, the seed, where the report goes, the sources."""
    parser.add_argument("--spec", help=spec_help)
    parser.add_argument("--seed", type=int, default=seed, help=seed_help)
    parser.add_argument("--out", default="reports", help="directory for the JSON report and PNG plots")
    parser.add_argument("--keep-raw", action="store_true", help="keep iperf3's own JSON reports under --out")
    source_arguments(parser)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """`railyard demo` and `railyard scenario ...`."""
    demo_parser = sub.add_parser("demo", help="the elephant scenario: ECMP, then Railyard TE, against the optimum")
    _run_arguments(demo_parser, SPEC_HELP, 3, "seed for the elephants' source ports (3 collides)")
    demo_parser.set_defaults(func=demo)

    scenarios = sub.add_parser("scenario", help="run a traffic scenario twice (ECMP, then Railyard TE) and report")
    ssub = scenarios.add_subparsers(dest="scenario_cmd", required=True, metavar="COMMAND")
    srun = ssub.add_parser("run", help="bring up the fabric, run the scenario on ECMP then with TE, tear down")
    srun.add_argument("name", help="a shipped scenario (see `railyard scenario list`) or a YAML path")
    spec_help = SPEC_HELP + "; overrides the scenario's own"
    _run_arguments(srun, spec_help, 1, "seeds source ports, job draws and noise (default 1)")
    srun.set_defaults(func=scenario_run)
    slist = ssub.add_parser("list", help="the shipped scenarios")
    slist.set_defaults(func=scenario_list)
    for parser in (demo_parser, srun, slist):
        json_flag(parser)
