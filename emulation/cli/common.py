"""What the emulation's subcommands share: flags, and the `sim` extra's check."""

from __future__ import annotations

import argparse

from controller.cli.output import CliError

SPEC_HELP = "fabric spec: a YAML path or a shipped spec's name (default: the demo spec)"


def needs_sim_extra(command: str) -> None:
    """The simulator and the reports need matplotlib (plots), which the daemon
    does not: it comes with the `sim` extra."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise CliError(command, "needs matplotlib, not installed", "pip install 'railyard[sim]' (the sim extra)")


def json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def source_arguments(parser: argparse.ArgumentParser) -> None:
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
