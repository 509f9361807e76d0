"""`railyard controller run` and the intent commands (`pin`, `unpin`, `pins`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import grpc

from controller.api.client import DEFAULT_TARGET, Client
from controller.fabric import load_fabric

DEFAULT_STORE = "/var/lib/railyard/intent.db"


def add_parsers(sub) -> None:
    ctl = sub.add_parser("controller", help="the Railyard controller daemon")
    csub = ctl.add_subparsers(dest="controller_cmd", required=True)
    run = csub.add_parser("run", help="run the daemon (OpenFlow southbound, gRPC API, metrics) until SIGTERM")
    run.add_argument("--spec", help="fabric spec YAML (default: the shipped demo spec)")
    run.add_argument("--store", default=DEFAULT_STORE, help=f"SQLite intent store (default {DEFAULT_STORE})")
    run.add_argument("--openflow-listen", default="127.0.0.1:6653", help="OpenFlow listener HOST:PORT")
    run.add_argument("--grpc-listen", default=DEFAULT_TARGET, help="gRPC API HOST:PORT")
    run.add_argument("--metrics-listen", default="127.0.0.1:9302", help="Prometheus /metrics HOST:PORT")
    run.add_argument("--reconcile-interval", type=float, default=10.0,
                     help="seconds between full reconcile passes (default 10)")

    for parser in _api_parsers(sub):
        parser.add_argument("--target", default=DEFAULT_TARGET, help=f"controller gRPC address (default {DEFAULT_TARGET})")
        parser.add_argument("--json", action="store_true", help="machine-readable output")


def _api_parsers(sub):
    pin = sub.add_parser("pin", help="pin a flow (or a NIC pair) to a spine; re-pinning a name moves it")
    pin.add_argument("name")
    pin.add_argument("--src", required=True, help="source NIC address")
    pin.add_argument("--dst", required=True, help="destination NIC address")
    pin.add_argument("--spine", required=True, help="spine (or fat-tree core) switch name")
    pin.add_argument("--protocol", choices=["tcp", "udp"], help="narrow to one transport protocol")
    pin.add_argument("--src-port", type=int, default=0)
    pin.add_argument("--dst-port", type=int, default=0)
    pin.add_argument("--forward-only", action="store_true", help="do not pin the reverse direction (ACKs)")
    unpin = sub.add_parser("unpin", help="remove a pin; the flow falls back to ECMP")
    unpin.add_argument("name")
    pins = sub.add_parser("pins", help="list pins")
    return pin, unpin, pins


def controller_run(args) -> int:
    from controller.daemon import DaemonConfig, Listen, run

    config = DaemonConfig(
        store=Path(args.store),
        openflow=Listen.parse(args.openflow_listen, "openflow-listen"),
        grpc=Listen.parse(args.grpc_listen, "grpc-listen"),
        metrics=Listen.parse(args.metrics_listen, "metrics-listen"),
        reconcile_interval_s=args.reconcile_interval,
    )
    return run(load_fabric(args.spec), config)


def _pin_row(pin) -> dict:
    m = pin.match
    proto = {0: "any", 1: "tcp", 2: "udp"}[m.protocol]
    return {"name": pin.name, "src": f"{m.src_address}:{m.src_port or '*'}", "dst": f"{m.dst_address}:{m.dst_port or '*'}",
            "protocol": proto, "spine": pin.spine, "symmetric": not pin.forward_only}


def _print(rows: list[dict], as_json: bool) -> None:
    if as_json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return
    if not rows:
        print("(none)")
        return
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    print("  ".join(c.upper().ljust(widths[c]) for c in cols))
    for row in rows:
        print("  ".join(str(row[c]).ljust(widths[c]) for c in cols))


def api_command(args) -> int:
    try:
        with Client(args.target) as client:
            if args.cmd == "pin":
                reply = client.pin_flow(args.name, args.src, args.dst, args.spine, args.protocol or "",
                                        args.src_port, args.dst_port, args.forward_only)
                _print([_pin_row(reply.pin)], args.json)
            elif args.cmd == "unpin":
                _print([_pin_row(client.unpin_flow(args.name).pin)], args.json)
            else:
                _print([_pin_row(p) for p in client.list_pins()], args.json)
    except grpc.RpcError as exc:
        print(f"railyard: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    return 0
