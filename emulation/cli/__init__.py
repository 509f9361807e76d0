"""`railyard fabric | demo | scenario | simulate | observe`: the emulation's
command-line front end, joined to `railyard` through an entry point; a
module per command."""

from __future__ import annotations

import argparse

from emulation.cli import fabric, observe, scenario, simulate


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `railyard.commands` entry point: fabric, demo, scenario, simulate, observe."""
    for command in (fabric, scenario, simulate, observe):
        command.add_parsers(sub)
