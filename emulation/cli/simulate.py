"""`railyard simulate`: the flow-level what-if simulator."""

from __future__ import annotations

import argparse
import sys
import time

from controller.cli.output import CliError, emit, writable_dir
from controller.fabric import load_fabric
from emulation.cli.common import json_flag, needs_sim_extra


def simulate(args) -> int:
    """The flow-level what-if simulator: no Mininet, no root, the real engine."""
    needs_sim_extra("simulate")
    import gc

    from emulation.model.sharing import Sharing
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
        result = run_simulation(
            fabric,
            workload,
            args.seed,
            args.duration,
            progress,
            notify=notify,
            sharing=Sharing(args.sharing),
            framed=not args.unframed,
            underlay=args.underlay,
        )
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

    emit(args.json, result.as_json(), text)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """`railyard simulate`."""
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
    sim.add_argument(
        "--sharing",
        choices=("proportional", "max-min"),  # emulation.model.sharing.Sharing, not imported without the sim extra
        default="proportional",
        help="how flows share a link: proportional (what TCP converges to; default) or max-min (the optimum's own)",
    )
    sim.add_argument(
        "--unframed",
        action="store_true",
        help="flows move delivered bytes alone, as the optimum counts them (default: each pays its frame headers"
        " and TCP's ACKs on the wire, as in the emulation)",
    )
    sim.add_argument(
        "--underlay",
        choices=("fabric", "controller"),
        default="fabric",
        help="who installs the ECMP underlay in TE's arm: the fabric (default, as the emulation's own select groups)"
        " or the controller, whose hash keeps unpinned traffic off the uplinks placed jobs fill",
    )
    sim.add_argument("--out", default="reports", help="directory for the JSON result and the PNG")
    sim.set_defaults(func=simulate)
    json_flag(sim)
