"""The API commands: pins, jobs, free capacity, links, drains, as gRPC calls."""

from __future__ import annotations

import json
import sys

import grpc

from controller.api.client import DEFAULT_TARGET, PATTERNS, Client, ClientTls
from controller.api.gen.railyard.v1.placement_pb2 import PlaceJobRequest
from controller.errors import FieldError
from controller.intent.drains import DrainTarget

PATTERN_NAMES = {value: name for name, value in PATTERNS.items()}


def add_parsers(sub) -> None:
    for parser in _api_parsers(sub):
        parser.add_argument(
            "--target", default=DEFAULT_TARGET, help=f"controller gRPC address (default {DEFAULT_TARGET})"
        )
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        parser.add_argument(
            "--ca", help="CA the controller's certificate chains to (TLS; with --cert and --key, or --token)"
        )
        parser.add_argument("--cert", help="this client's certificate (PEM): its identity")
        parser.add_argument("--key", help="this client's private key (PEM)")
        parser.add_argument(
            "--token", metavar="FILE", help="a file holding this client's bearer token (the token listener)"
        )


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

    place = _job_parser(sub, "place", "place a job: rail-aligned GPUs and a spine for each cross-pod flow")
    place.add_argument(
        "--servers", default="", help="comma-separated explicit servers: scheduler node names (--hosts) or ryh<p>s<i>"
    )
    place.add_argument("--max-pods", type=int, default=0)
    place.add_argument("--exclusive", action="store_true", help="no other job may share the servers")
    place.add_argument("--request-id", default="", help="retry key: same id returns the original placement")
    place.add_argument(
        "--wait-programmed",
        type=float,
        metavar="SECONDS",
        help="return once every switch the job uses holds its entries (exit 1 if not within SECONDS)",
    )
    place.add_argument("--validate-only", action="store_true", help="show the placement it would make; place nothing")
    score = _job_parser(sub, "score", "score candidate server sets for a job (predicted utilization), placing nothing")
    score.add_argument(
        "--candidate",
        action="append",
        required=True,
        help="comma-separated servers (node names or ryh<p>s<i>); repeat for each candidate",
    )
    release = sub.add_parser("release", help="release a job's GPUs and paths")
    release.add_argument("job_id")
    jobs = sub.add_parser("jobs", help="list jobs, or show one")
    jobs.add_argument("job_id", nargs="?")
    free = sub.add_parser("free", help="free GPUs per pod, and with --servers per server")
    free.add_argument("--pod", type=int, action="append", default=[], help="only this pod (repeatable)")
    free.add_argument("--servers", action="store_true", help="also list the servers with a free GPU")
    free.add_argument("--all", action="store_true", help="with --servers: list full servers too")
    links = sub.add_parser("links", help="links with drain state, predicted and measured load")
    links.add_argument("--switch", default="", help="only this switch's links")
    links.add_argument("--access", action="store_true", help="include NIC links")
    drains = []
    for verb in ("drain", "undrain"):
        parser = sub.add_parser(verb, help=f"{verb} a link (SWITCH:PORT) or a switch")
        parser.add_argument("kind", choices=[t.value for t in DrainTarget])
        parser.add_argument("name")
        drains.append(parser)
    health = sub.add_parser(
        "health", help="exit 0 if the controller reports SERVING (a probe: --service railyard.leader on the leader)"
    )
    health.add_argument(
        "--service",
        default="",
        help="'' the API (default), railyard.fabric every switch reconciled, railyard.leader this replica leads",
    )
    return pin, unpin, pins, place, score, release, jobs, free, links, health, *drains


def _job_parser(sub, name: str, help_text: str):
    """A command about one job request: its id, size, pattern and flows."""
    parser = sub.add_parser(name, help=help_text)
    parser.add_argument("job_id")
    parser.add_argument("--gpus", type=int, required=True, help="GPU count")
    parser.add_argument("--pattern", choices=["ring", "tree", "all-to-all"], default="ring")
    parser.add_argument("--flow-gbps", type=float, default=0.0, help="per-flow ceiling, Gb/s (0: the NIC)")
    parser.add_argument("--gpus-per-server", type=int, default=0, help="default: min(gpus, rails)")
    return parser


def all_or_none(args, flags: tuple[str, ...], error: type[FieldError]) -> list[str] | None:
    """The values of options that go together; None when none is given."""
    values = [getattr(args, flag.replace("-", "_")) for flag in flags]
    if not any(values):
        return None
    missing = [flag for flag, value in zip(flags, values) if not value]
    if missing:
        together = ", ".join(f"--{flag}" for flag in flags[:-1]) + f" and --{flags[-1]} go together"
        raise error(missing[0], "missing", together)
    return values


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


def _job_row(job) -> dict:
    return {
        "job": job.job_id,
        "gpus": len(job.gpus),
        "pattern": PATTERN_NAMES.get(job.request.pattern, "?"),
        "pods": ",".join(map(str, job.pods)),
        "flows": job.flow_count,
        "predicted_max_util": f"{job.predicted_max_utilization_ratio:.3f}",
        "cross_cluster": f"{job.cross_cluster_share:.3f}",
        "programmed_at": job.programmed_revision or "-",
    }


def _job_detail(job, flows) -> list[dict]:
    return [
        {
            "rank": g.rank,
            "node": g.node,
            "server": g.server,
            "pod": g.pod,
            "rail": g.rail,
            "nic": g.nic_address,
            "leaf": g.leaf,
            "sends_via": ",".join(sorted({f.spine for f in flows if f.src_address == g.nic_address and f.spine}))
            or "-",
        }
        for g in job.gpus
    ]


def _link_row(link) -> dict:
    worst = max(link.directions, key=lambda d: d.utilization_ratio)
    return {
        "link": link.name,
        "a": f"{link.a_node}:{link.a_port}",
        "b": f"{link.b_node}:{link.b_port}",
        "gbps": f"{link.capacity_bps / 1e9:g}",
        "drained": link.drained,
        "util": f"{worst.utilization_ratio:.3f}",
        "hot_dir": f"{worst.from_node}:{worst.from_port}",
        "queue_bytes": max(d.queue_bytes for d in link.directions),
    }


def _as_json(message, defaults: bool = False) -> dict:
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(message, always_print_fields_with_no_presence=defaults, preserving_proto_field_name=True)


class CliError(FieldError):
    context = "client"


def _client_tls(args) -> ClientTls | None:
    if args.token:
        if args.cert or args.key:
            raise CliError("token", "given with --cert/--key", "a certificate and key, or a token, not both")
        if not args.ca:
            raise CliError("ca", "missing", "--token goes with --ca (the token listener is TLS)")
        try:
            return ClientTls.with_token(args.ca, args.token)
        except OSError as exc:
            raise CliError("ca", f"cannot read {exc.filename}: {exc.strerror}", "a readable PEM file") from None
    given = all_or_none(args, ("ca", "cert", "key"), CliError)
    if given is None:
        return None
    try:
        return ClientTls.from_files(*given)
    except OSError as exc:
        raise CliError("ca/cert/key", f"cannot read {exc.filename}: {exc.strerror}", "readable PEM files") from None


def api_command(args) -> int:
    try:
        with Client(args.target, tls=_client_tls(args)) as client:
            return _run_api(client, args)
    except grpc.RpcError as exc:
        print(f"railyard: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1


def _run_api(client: Client, args) -> int:
    """The command's exit status."""
    cmd = args.cmd
    if cmd == "health":
        serving = client.serving(args.service)
        print("SERVING" if serving else "NOT_SERVING")
        return 0 if serving else 1
    if cmd == "pin":
        reply = client.pin_flow(
            args.name,
            args.src,
            args.dst,
            args.spine,
            args.protocol or "",
            args.src_port,
            args.dst_port,
            args.forward_only,
        )
        _print([_pin_row(reply.pin)], args.json)
    elif cmd == "unpin":
        _print([_pin_row(client.unpin_flow(args.name).pin)], args.json)
    elif cmd == "pins":
        _print([_pin_row(p) for p in client.list_pins()], args.json)
    elif cmd == "place":
        servers = [s for s in args.servers.split(",") if s]
        placed = client.place_job(
            args.job_id,
            args.gpus,
            args.pattern,
            args.flow_gbps,
            args.gpus_per_server,
            servers,
            args.max_pods,
            args.exclusive,
            args.request_id,
            view="full" if args.validate_only else "summary",
            validate_only=args.validate_only,
        )
        job = placed.job
        if args.validate_only:  # nothing placed: its flows came with it
            _show_job(job, args.json, list(job.flows))
            return 0
        if args.wait_programmed is not None:
            if not client.wait_programmed(args.job_id, args.wait_programmed):
                print(
                    f"railyard: job {args.job_id} placed, not programmed within {args.wait_programmed:g} s",
                    file=sys.stderr,
                )
                return 1
            job = client.get_job(args.job_id)
        _show_job(job, args.json, client.job_flows(args.job_id))
    elif cmd == "score":
        request = PlaceJobRequest(
            job_id=args.job_id,
            gpu_count=args.gpus,
            pattern=PATTERNS[args.pattern],
            flow_bandwidth_gbps=args.flow_gbps,
            gpus_per_server=args.gpus_per_server,
        )
        scored = client.score_placements(request, [[n for n in c.split(",") if n] for c in args.candidate])
        _show_scores(scored, args.candidate, args.json)
    elif cmd == "release":
        _show_job(client.release_job(args.job_id), args.json)
    elif cmd == "jobs":
        if args.job_id:
            _show_job(client.get_job(args.job_id), args.json, client.job_flows(args.job_id))
        elif args.json:
            _print([_as_json(j) for j in client.list_jobs()], True)
        else:
            _print([_job_row(j) for j in client.list_jobs()], False)
    elif cmd == "free":
        capacity = client.free_capacity(args.pod, include_full_servers=args.all)
        if args.json:
            # Every field, zeros too: a script reads pod 0 and 0 free servers like any other value.
            _print([_as_json(capacity, defaults=True)], True)
        else:
            _show_free(capacity, args.servers)
    elif cmd == "links":
        links = client.list_links(args.switch, args.access)
        _print([_as_json(link) for link in links] if args.json else [_link_row(link) for link in links], args.json)
    else:
        reply = client.drain(DrainTarget(args.kind), args.name, drained=cmd == "drain")
        _print(
            [_as_json(reply)]
            if args.json
            else [
                {
                    "kind": args.kind,
                    "name": args.name,
                    "state": cmd + "ed",
                    "rerouted_jobs": ",".join(getattr(reply, "rerouted_job_ids", [])) or "-",
                }
            ],
            args.json,
        )
    return 0


def _show_job(job, as_json: bool, flows=None) -> None:
    """`flows`: the job's flows (paged by the caller) for a per-GPU detail; None: the summary alone."""
    if as_json:
        _print([_as_json(job)], True)
        return
    _print([_job_row(job)], False)
    if flows is not None:
        print()
        _print(_job_detail(job, flows), False)


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
    _print([*pods, total], False)
    if servers:
        print()
        _print(
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
            ],
            False,
        )


def _show_scores(reply, candidates: list[str], as_json: bool) -> None:
    if as_json:
        _print([_as_json(reply, defaults=True)], True)
        return
    rows = [
        {
            "rank": s.rank,
            "candidate": candidates[s.candidate],
            "feasible": s.feasible,
            "predicted_max_util": f"{s.predicted_max_utilization_ratio:.3f}",
            "spine_tier_peak": f"{s.spine_tier_peak_ratio:.3f}",
            "cross_cluster": f"{s.cross_cluster_share:.3f}",
            "score": f"{s.score:.3f}",
            "reason": s.reason or "-",
        }
        for s in sorted(reply.scores, key=lambda s: s.rank)
    ]
    _print(rows, False)
