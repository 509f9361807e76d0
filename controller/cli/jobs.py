"""`railyard place | score | release | jobs`: a scheduler's calls."""

from __future__ import annotations

import sys

from controller.api.client import PATTERNS, Client
from controller.api.gen.railyard.v1.placement_pb2 import PlaceJobRequest
from controller.cli.connect import add_client_options, api_command
from controller.cli.output import as_dict, emit, print_json, print_table

PATTERN_NAMES = {value: name for name, value in PATTERNS.items()}


def add_job_parsers(sub) -> None:
    place = _job_parser(sub, "place", "place a job: rail-aligned GPUs and a spine for each cross-pod flow")
    place.add_argument(
        "--servers", default="", help="comma-separated explicit servers: scheduler node names (--hosts) or ryh<p>s<i>"
    )
    place.add_argument("--max-pods", type=int, default=0, help="at most this many pods (0: any)")
    place.add_argument("--exclusive", action="store_true", help="no other job may share the servers")
    place.add_argument(
        "--qps", type=int, default=1, help="queue pairs per connection (NCCL_IB_QPS_PER_CONNECTION), 1-16"
    )
    place.add_argument("--request-id", default="", help="retry key: same id returns the original placement")
    place.add_argument(
        "--wait-programmed",
        type=float,
        metavar="SECONDS",
        help="return once every switch the job uses holds its entries (exit 1 if not within SECONDS)",
    )
    place.add_argument("--validate-only", action="store_true", help="show the placement it would make; place nothing")
    place.set_defaults(func=api_command(place_job))

    score = _job_parser(sub, "score", "score candidate server sets for a job (predicted utilization), placing nothing")
    score.add_argument(
        "--candidate",
        action="append",
        required=True,
        help="comma-separated servers (node names or ryh<p>s<i>); repeat for each candidate",
    )
    score.set_defaults(func=api_command(score_job))

    release = sub.add_parser("release", help="release a job's GPUs and paths")
    release.add_argument("job_id")
    release.set_defaults(func=api_command(release_job))

    jobs = sub.add_parser("jobs", help="list jobs, or show one with its GPUs and paths")
    jobs.add_argument("job_id", nargs="?")
    jobs.set_defaults(func=api_command(show_jobs))
    for parser in (place, score, release, jobs):
        add_client_options(parser)


def _job_parser(sub, name: str, help_text: str):
    """A command about one job request: its id, size, pattern and flows."""
    parser = sub.add_parser(name, help=help_text)
    parser.add_argument("job_id")
    parser.add_argument("--gpus", type=int, required=True, help="GPU count")
    parser.add_argument("--pattern", choices=sorted(PATTERNS), default="ring", help="collective (default ring)")
    parser.add_argument("--flow-gbps", type=float, default=0.0, help="per-flow ceiling, Gb/s (0: the NIC)")
    parser.add_argument("--gpus-per-server", type=int, default=0, help="default: min(gpus, rails)")
    return parser


def place_job(client: Client, args) -> int:
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
        qps_per_connection=args.qps,
    )
    job = placed.job
    if args.validate_only:  # nothing placed: its flows came with it
        _show_job(job, args.json, list(job.flows))
        return 0
    if args.wait_programmed is not None:
        if not client.wait_programmed(args.job_id, args.wait_programmed):
            print(
                f"railyard: job {args.job_id} placed, not programmed within {args.wait_programmed:g} s", file=sys.stderr
            )
            return 1
        job = client.get_job(args.job_id)
    _show_job(job, args.json, client.job_flows(args.job_id))
    return 0


def score_job(client: Client, args) -> int:
    request = PlaceJobRequest(
        job_id=args.job_id,
        gpu_count=args.gpus,
        pattern=PATTERNS[args.pattern],
        flow_bandwidth_gbps=args.flow_gbps,
        gpus_per_server=args.gpus_per_server,
    )
    scored = client.score_placements(request, [[n for n in c.split(",") if n] for c in args.candidate])
    emit(args.json, as_dict(scored), lambda: print_table(_score_rows(scored, args.candidate)))
    return 0


def release_job(client: Client, args) -> int:
    _show_job(client.release_job(args.job_id), args.json)
    return 0


def show_jobs(client: Client, args) -> int:
    if args.job_id:
        _show_job(client.get_job(args.job_id), args.json, client.job_flows(args.job_id))
        return 0
    jobs = client.list_jobs()
    emit(args.json, [as_dict(j) for j in jobs], lambda: print_table([_job_row(j) for j in jobs]))
    return 0


def _show_job(job, as_json: bool, flows=None) -> None:
    """One job. `flows`: its flows (paged by the caller), shown per GPU, and
    in JSON as the job's `flows`; None: the summary alone."""
    if as_json:
        data = as_dict(job)
        if flows is not None:
            data["flows"] = [as_dict(f) for f in flows]
        print_json(data)
        return
    print_table([_job_row(job)])
    if flows is not None:
        print()
        print_table(_job_detail(job, flows))


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


def _score_rows(reply, candidates: list[str]) -> list[dict]:
    return [
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
