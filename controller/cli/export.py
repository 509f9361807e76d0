"""`railyard export KIND`: the fabric's topology in a scheduler's format."""

from __future__ import annotations

import sys

from controller.cli.output import CliError, write_file


def add_export_parser(sub) -> None:
    from controller.schedulers.exports import EXPORTERS, SLURM_BLOCK_DEFAULT

    export = sub.add_parser(
        "export",
        help="the fabric's topology for a scheduler: Slurm tree/block, Kueue, Volcano, Topograph labels",
    )
    export.add_argument("kind", choices=sorted(EXPORTERS))
    export.add_argument("--spec", help="fabric spec: a YAML path or a shipped spec's name (default: the demo spec)")
    export.add_argument("--hosts", help="host map YAML: each server's scheduler node name (default: its own)")
    export.add_argument("--out", help="write here instead of stdout")
    export.add_argument(
        "--slurm-version",
        metavar="X.Y",
        help=f"slurm-block: the Slurm release it is for: 25.05 or later gets topology.yaml, 23.11 to 24.11 "
        f"topology.conf BlockName= lines (default {SLURM_BLOCK_DEFAULT})",
    )
    export.set_defaults(func=export_topology)


def export_topology(args) -> int:
    from controller.fabric import load_fabric
    from controller.schedulers.exports import EXPORTERS, slurm_block
    from controller.schedulers.hosts import load_hosts

    if args.slurm_version and args.kind != "slurm-block":
        raise CliError("--slurm-version", f"given with {args.kind}", "only with slurm-block")
    fabric = load_fabric(args.spec)
    hosts = load_hosts(fabric, args.hosts)
    if args.kind == "slurm-block" and args.slurm_version:
        text = slurm_block(fabric, hosts, args.slurm_version)
    else:
        text = EXPORTERS[args.kind](fabric, hosts)  # a FieldError is reported by main
    if args.out:
        write_file(args.out, text, "out")
    else:
        sys.stdout.write(text)
    return 0
