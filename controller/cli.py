"""The `railyard` command."""

from __future__ import annotations

import argparse
import logging
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="railyard", description="Railyard: TE controller for rail-optimized fabrics")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    sub = parser.add_subparsers(dest="cmd", required=True)

    fabric = sub.add_parser("fabric", help="the emulated fabric (Mininet + Open vSwitch)")
    fsub = fabric.add_subparsers(dest="fabric_cmd", required=True)
    show = fsub.add_parser("show", help="print the fabric model a spec describes")
    show.add_argument("--spec", help="fabric spec YAML (default: the shipped demo spec)")
    show.add_argument("--addresses", action="store_true", help="list every NIC's address, MAC and leaf port")
    up = fsub.add_parser("up", help="build the emulated fabric with its ECMP underlay; runs until Ctrl-C")
    up.add_argument("--spec", help="fabric spec YAML (default: the shipped demo spec)")
    up.add_argument("--controller", help="OpenFlow controller target, e.g. tcp:127.0.0.1:6653 (default: from spec)")
    up.add_argument("--cli", action="store_true", help="open the Mininet CLI instead of waiting for a signal")
    down = fsub.add_parser("down", help="remove Railyard's bridges, namespaces and processes (only those)")
    down.add_argument("--name", help="only the fabric with this name")
    fsub.add_parser("status", help="list running Railyard fabrics and bridges")

    demo = sub.add_parser("demo", help="the elephant scenario: ECMP, then Railyard TE, against the optimum")
    demo.add_argument("--spec", help="fabric spec YAML (default: the shipped demo spec)")
    demo.add_argument("--seed", type=int, default=3, help="seed for the elephants' source ports (3 collides)")
    demo.add_argument("--out", default="reports", help="directory for the report")

    scenario = sub.add_parser("scenario", help="run a traffic scenario twice (ECMP, then Railyard TE) and report")
    ssub = scenario.add_subparsers(dest="scenario_cmd", required=True)
    srun = ssub.add_parser("run", help="bring up the fabric, run the scenario on ECMP then with TE, tear down")
    srun.add_argument("name", help="a shipped scenario (see `railyard scenario list`) or a YAML path")
    srun.add_argument("--spec", help="fabric spec YAML (default: the shipped demo spec)")
    srun.add_argument("--seed", type=int, default=1)
    srun.add_argument("--out", default="reports", help="directory for the JSON report and PNG plots")
    ssub.add_parser("list", help="the shipped scenarios")

    observe = sub.add_parser("observe", help="run a local Prometheus (with Railyard's alert rules) scraping a controller")
    observe.add_argument("--metrics", default="127.0.0.1:9302", help="the controller's metrics HOST:PORT")
    observe.add_argument("--port", type=int, default=9090, help="Prometheus listen port on 127.0.0.1")
    observe.add_argument("--data", default=".state/prometheus", help="Prometheus data directory")

    from controller.commands import add_parsers

    add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from controller.errors import FieldError, HostError

    try:
        if args.cmd == "fabric":
            from emulation.commands import main_fabric

            return main_fabric(args)
        if args.cmd == "demo":
            args.scenario_cmd, args.name = "run", "elephant"
        if args.cmd == "observe":
            from emulation.commands import observe

            return observe(args)
        if args.cmd in ("demo", "scenario"):
            from emulation.commands import scenario

            return scenario(args)
        if args.cmd == "controller":
            from controller.commands import controller_run

            return controller_run(args)
        from controller.commands import api_command

        return api_command(args)
    except (FieldError, HostError) as exc:
        print(f"railyard: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
