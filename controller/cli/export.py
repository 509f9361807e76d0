"""`railyard export KIND`: the fabric's topology in a scheduler's format."""

from __future__ import annotations

import sys
from pathlib import Path


def add_export_parser(sub) -> None:
    from controller.schedulers.exports import EXPORTERS

    export = sub.add_parser(
        "export",
        help="the fabric's topology for a scheduler: Slurm tree/block, Kueue, Volcano, Topograph labels",
    )
    export.add_argument("kind", choices=sorted(EXPORTERS))
    export.add_argument("--spec", help="fabric spec YAML (default: the shipped demo spec)")
    export.add_argument("--hosts", help="host map YAML: each server's scheduler node name (default: its own)")
    export.add_argument("--out", help="write here instead of stdout")
    export.set_defaults(run=export_topology)


def export_topology(args) -> int:
    from controller.fabric import load_fabric
    from controller.schedulers.exports import EXPORTERS
    from controller.schedulers.hosts import load_hosts

    fabric = load_fabric(args.spec)
    text = EXPORTERS[args.kind](fabric, load_hosts(fabric, args.hosts))  # a FieldError is reported by main
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0
