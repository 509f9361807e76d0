"""The `railyard` command."""

from __future__ import annotations

import argparse
import logging
import sys
from importlib.metadata import entry_points

from controller.cli.certs import add_certs_parser
from controller.cli.commands import add_parsers, api_command
from controller.cli.daemon import add_controller_parser, controller_run
from controller.cli.export import add_export_parser
from controller.errors import FieldError, HostError

COMMAND_GROUPS = "railyard.commands"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="railyard", description="Railyard: TE controller for rail-optimized fabrics")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    sub = parser.add_subparsers(dest="cmd", required=True)

    add_controller_parser(sub)
    add_parsers(sub)
    add_certs_parser(sub)
    add_export_parser(sub)
    # Other packages (the emulation) add their command groups here, so this
    # package never imports them: dependencies point one way.
    for group in entry_points(group=COMMAND_GROUPS):
        group.load()(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        if hasattr(args, "run"):
            return int(args.run(args))
        if args.cmd == "controller":
            return controller_run(args)
        return api_command(args)
    except (FieldError, HostError) as exc:
        print(f"railyard: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
