"""The API commands about the fabric: pins, free capacity, links, drains, health."""

from __future__ import annotations

from controller.api.client import Client
from controller.cli.connect import add_client_options, api_command
from controller.cli.jobs import add_job_parsers
from controller.cli.output import as_dict, emit, print_table
from controller.intent.drains import DrainTarget


def add_parsers(sub) -> None:
    add_job_parsers(sub)
    for parser in _fabric_parsers(sub):
        add_client_options(parser)


def _fabric_parsers(sub):
    pin = sub.add_parser("pin", help="pin a flow (or a NIC pair) to a spine; re-pinning a name moves it")
    pin.add_argument("name")
    pin.add_argument("--src", required=True, help="source NIC address")
    pin.add_argument("--dst", required=True, help="destination NIC address")
    pin.add_argument("--spine", required=True, help="spine (or fat-tree core) switch name")
    pin.add_argument("--protocol", choices=["tcp", "udp"], help="narrow to one transport protocol")
    pin.add_argument("--src-port", type=int, default=0, help="narrow to this source port (0: any)")
    pin.add_argument("--dst-port", type=int, default=0, help="narrow to this destination port (0: any)")
    pin.add_argument("--forward-only", action="store_true", help="do not pin the reverse direction (ACKs)")
    pin.set_defaults(func=api_command(pin_flow))
    unpin = sub.add_parser("unpin", help="remove a pin; the flow falls back to ECMP")
    unpin.add_argument("name")
    unpin.set_defaults(func=api_command(unpin_flow))
    pins = sub.add_parser("pins", help="list pins")
    pins.set_defaults(func=api_command(list_pins))
    free = sub.add_parser("free", help="free GPUs per pod, and with --servers per server")
    free.add_argument("--pod", type=int, action="append", default=[], help="only this pod (repeatable)")
    free.add_argument("--servers", action="store_true", help="also list the servers with a free GPU")
    free.add_argument("--all", action="store_true", help="with --servers: list full servers too")
    free.set_defaults(func=api_command(show_free))
    links = sub.add_parser("links", help="links with drain state, predicted and measured load")
    links.add_argument("--switch", default="", help="only this switch's links")
    links.add_argument("--access", action="store_true", help="include NIC links")
    links.set_defaults(func=api_command(show_links))
    drains = []
    for verb in ("drain", "undrain"):
        parser = sub.add_parser(verb, help=f"{verb} a link (SWITCH:PORT) or a switch")
        parser.add_argument("kind", choices=[t.value for t in DrainTarget])
        parser.add_argument("name")
        parser.set_defaults(func=api_command(drain), drained=verb == "drain")
        drains.append(parser)
    health = sub.add_parser(
        "health", help="exit 0 if the controller reports SERVING (a probe: --service railyard.leader on the leader)"
    )
    health.add_argument(
        "--service",
        default="",
        help="'' the API (default), railyard.fabric every switch reconciled, railyard.leader this replica leads",
    )
    health.set_defaults(func=api_command(health_check))
    return pin, unpin, pins, free, links, health, *drains


def pin_flow(client: Client, args) -> int:
    reply = client.pin_flow(
        args.name, args.src, args.dst, args.spine, args.protocol or "", args.src_port, args.dst_port, args.forward_only
    )
    _show_pin(reply.pin, args.json)
    return 0


def unpin_flow(client: Client, args) -> int:
    _show_pin(client.unpin_flow(args.name).pin, args.json)
    return 0


def list_pins(client: Client, args) -> int:
    pins = client.list_pins()
    emit(args.json, [as_dict(p) for p in pins], lambda: print_table([_pin_row(p) for p in pins]))
    return 0


def _show_pin(pin, as_json: bool) -> None:
    emit(as_json, as_dict(pin), lambda: print_table([_pin_row(pin)]))


def _pin_row(pin) -> dict:
    m = pin.match
    proto = {0: "any", 1: "tcp", 2: "udp"}[m.protocol]
    return {
        "name": pin.name,
        "src": f"{m.src_address}:{m.src_port or '*'}",
        "dst": f"{m.dst_address}:{m.dst_port or '*'}",
        "protocol": proto,
        "spine": pin.spine,
        "symmetric": not pin.forward_only,
    }


def show_free(client: Client, args) -> int:
    capacity = client.free_capacity(args.pod, include_full_servers=args.all)
    emit(args.json, as_dict(capacity), lambda: _show_free(capacity, args.servers))
    return 0


def _show_free(reply, servers: bool) -> None:
    pods = [
        {
            "pod": p.pod,
            "gpus": p.gpu_count,
            "free": p.free_gpu_count,
            "whole_free_servers": p.whole_free_servers,
            "partly_free_servers": p.partly_free_servers,
        }
        for p in reply.pods
    ]
    total = {
        "pod": "total",
        "gpus": reply.gpu_count,
        "free": reply.free_gpu_count,
        "whole_free_servers": reply.whole_free_servers,
        "partly_free_servers": reply.partly_free_servers,
    }
    print_table([*pods, total])
    if servers:
        print()
        print_table(
            [
                {
                    "node": s.node,
                    "server": s.server,
                    "pod": s.pod,
                    "gpus": s.gpu_count,
                    "free": s.free_gpu_count,
                    "free_rails": ",".join(map(str, s.free_rails)) or "-",
                    "exclusive": s.exclusive,
                }
                for s in reply.servers
            ]
        )


def show_links(client: Client, args) -> int:
    links = client.list_links(args.switch, args.access)
    emit(args.json, [as_dict(link) for link in links], lambda: print_table([_link_row(link) for link in links]))
    return 0


def _link_row(link) -> dict:
    worst = max(link.directions, key=lambda d: d.utilization_ratio)
    return {
        "link": link.name,
        "to": f"{link.b_node}:{link.b_port}",
        "gbps": f"{link.capacity_bps / 1e9:g}",
        "drained": link.drained,
        "util": f"{worst.utilization_ratio:.3f}",
        "hot_dir": f"{worst.from_node}:{worst.from_port}",
        "queue_bytes": max(d.queue_bytes for d in link.directions),
    }


def drain(client: Client, args) -> int:
    reply = client.drain(DrainTarget(args.kind), args.name, drained=args.drained)
    row = {
        "kind": args.kind,
        "name": args.name,
        "state": "drained" if args.drained else "undrained",
        "rerouted_jobs": ",".join(getattr(reply, "rerouted_job_ids", [])) or "-",
    }
    emit(args.json, as_dict(reply), lambda: print_table([row]))
    return 0


def health_check(client: Client, args) -> int:
    """Exit 0 when SERVING. A controller that cannot be reached is a failed
    call (its cause on stderr), never a quiet NOT_SERVING."""
    status = client.health(args.service)
    emit(args.json, {"service": args.service, "status": status}, lambda: print(status))
    return 0 if status == "SERVING" else 1
