"""`railyard fabric show | up | down | status`: the emulated fabric (Mininet + Open vSwitch)."""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from pathlib import Path

from controller.cli.output import emit
from controller.fabric import Tier, load_fabric
from controller.fabric import addressing as ad
from emulation.cli.common import SPEC_HELP, json_flag


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


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """`railyard fabric ...`."""
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
        json_flag(parser)
