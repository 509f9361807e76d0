"""The `railyard` command. Each subcommand sets its handler (`func`) on its
parser; `main` runs it and turns what a user can cause into one line on
stderr: bad input (exit 2), a file that cannot be read or written (exit 2),
a closed pipe (quiet)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from importlib.metadata import entry_points

from controller.cli.certs import add_certs_parser
from controller.cli.commands import add_parsers
from controller.cli.daemon import add_controller_parser, with_config_file
from controller.cli.export import add_export_parser
from controller.errors import FieldError, HostError
from controller.metrics import railyard_version

COMMAND_GROUPS = "railyard.commands"
EXIT_BROKEN_PIPE = 128 + 13  # as a tool killed by SIGPIPE
EXIT_INTERRUPTED = 128 + 2  # as one killed by SIGINT


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="railyard", description="Railyard: TE controller for rail-optimized fabrics")
    parser.add_argument("--version", action="version", version=f"railyard {railyard_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

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
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = with_config_file(_parser(), argv)  # --help and usage errors print here
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
        )
        status = int(args.func(args))
        sys.stdout.flush()  # inside the try: a reader that went away is seen here, not at exit
        return status
    except BrokenPipeError:
        # The reader closed the pipe (`railyard scenario list | head -2`):
        # nothing more to say, and nobody to say it to.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:  # Ctrl-C: the user knows why
        print(file=sys.stderr)
        return EXIT_INTERRUPTED
    except (FieldError, HostError) as exc:
        print(f"railyard: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.filename is None:
            raise
        # A path from the command line that cannot be opened: the user's to fix.
        print(f"railyard: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
