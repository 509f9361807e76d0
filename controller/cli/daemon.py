"""`railyard controller run`: its options, and the daemon's configuration from them."""

from __future__ import annotations

from pathlib import Path

from controller.api.client import DEFAULT_TARGET
from controller.cli.commands import all_or_none
from controller.fabric import load_fabric

DEFAULT_STORE = "/var/lib/railyard/intent.db"


def add_controller_parser(sub) -> None:
    ctl = sub.add_parser("controller", help="the Railyard controller daemon")
    csub = ctl.add_subparsers(dest="controller_cmd", required=True)
    run = csub.add_parser("run", help="run the daemon (OpenFlow southbound, gRPC API, metrics) until SIGTERM")
    run.add_argument("--spec", help="fabric spec YAML (default: the shipped demo spec)")
    run.add_argument(
        "--store",
        default=DEFAULT_STORE,
        help=f"intent store: a SQLite file (default {DEFAULT_STORE}), or etcd://HOST:PORT[,HOST:PORT...]/PREFIX "
        "for replicas that elect a leader",
    )
    run.add_argument(
        "--hosts",
        metavar="FILE",
        help="host map YAML: each server's scheduler node name; the API accepts and returns them",
    )
    run.add_argument(
        "--extender-listen",
        metavar="HOST:PORT",
        help="serve kube-scheduler's extender protocol (POST /filter, /prioritize) here; HTTPS with --tls-*",
    )
    run.add_argument(
        "--advertise",
        metavar="HOST:PORT",
        help="with etcd: the address clients reach this replica's API at (followers name the leader by it; "
        "default --grpc-listen)",
    )
    run.add_argument("--etcd-ca", help="CA etcd's certificate chains to (https to etcd; with --etcd-cert/--etcd-key)")
    run.add_argument("--etcd-cert", help="this controller's client certificate for etcd (PEM)")
    run.add_argument("--etcd-key", help="its private key (PEM)")
    run.add_argument("--openflow-listen", default="127.0.0.1:6653", help="OpenFlow listener HOST:PORT")
    run.add_argument("--grpc-listen", default=DEFAULT_TARGET, help="gRPC API HOST:PORT")
    run.add_argument("--metrics-listen", default="127.0.0.1:9302", help="Prometheus /metrics HOST:PORT")
    run.add_argument(
        "--reconcile-interval",
        type=float,
        default=10.0,
        help="seconds between periodic passes, which check every switch's entry count (default 10)",
    )
    run.add_argument(
        "--full-audit-every",
        type=int,
        default=6,
        help="read every switch's table in full once in this many periodic passes, a share per pass (default 6)",
    )
    run.add_argument(
        "--no-te", action="store_true", help="no adaptive TE: placement and pins only, elephants stay on ECMP"
    )
    run.add_argument(
        "--watch-history",
        type=int,
        help="job events a WatchJobs from a revision can replay (default: the daemon's, 4096)",
    )
    run.add_argument("--tls-cert", help="the API's server certificate (PEM); with --tls-key, --tls-ca, --policy")
    run.add_argument("--tls-key", help="its private key (PEM)")
    run.add_argument("--tls-ca", help="the CA client certificates must chain to (mutual TLS)")
    run.add_argument("--policy", help="YAML: identities (client certificate CNs) -> roles")
    run.add_argument(
        "--grpc-token-listen",
        metavar="HOST:PORT",
        help="with --tls-* and --tokens: a second API listener, TLS without client certificates, "
        "where clients authenticate with a bearer token",
    )
    run.add_argument("--tokens", help="YAML: identities -> SHA-256 of their bearer tokens (railyard certs token)")
    run.add_argument(
        "--metrics-client-certs",
        action="store_true",
        help="with --tls-*: scrapers of /metrics must present a certificate from the CA",
    )
    run.add_argument(
        "--mutations-per-second",
        type=float,
        help="a caller's mutations per second, bursts of twice that (default 50); over it: RESOURCE_EXHAUSTED",
    )
    run.add_argument(
        "--telemetry-records-per-second",
        type=float,
        help="records per second on one telemetry stream, bursts of twice that (default 50000)",
    )
    run.add_argument(
        "--audit-log",
        metavar="PATH",
        help="append one JSON line per mutation and per refused call to PATH ('-': stderr)",
    )
    run.add_argument(
        "--insecure",
        action="store_true",
        help="allow listeners on non-loopback addresses without TLS (logged as a warning)",
    )
    run.add_argument(
        "--sflow-listen",
        metavar="HOST:PORT",
        help="collect sFlow v5 from the switches' agents on this UDP address (e.g. 127.0.0.1:6343): flow "
        "samples give elephants and the uplinks they took, counter samples port rates",
    )
    run.add_argument(
        "--sflow-agents",
        metavar="FILE",
        help="YAML: the networks and agents the sFlow collector hears, and which switch an agent without "
        "OpenFlow port structures is (default: loopback agents only)",
    )
    run.add_argument(
        "--underlay",
        action="store_true",
        help="install and keep the spec's ECMP underlay (host and prefix routes, select groups) on every switch, "
        "under its own cookie owner: for a fabric brought up bare (fabric up --bare) or OpenFlow switches "
        "nothing else routes",
    )
    run.add_argument(
        "--southbound",
        choices=("openflow", "none"),
        default="openflow",
        help="none: advisory. No OpenFlow listener, nothing programmed; placement and TE run on the telemetry "
        "(sFlow or the agent) and TE's moves are served as recommendations (TeService.WatchDecisions, metrics)",
    )
    run.add_argument(
        "--openflow-stats-interval",
        type=float,
        metavar="SECONDS",
        help="poll every switch's port statistics (and Railyard's meters') over the OpenFlow sessions this often, "
        "for link loads and state with no agent: 3 costs a 768-switch fabric no more than the periodic audit, "
        "a small one can take 1 (default 0: off)",
    )
    run.add_argument(
        "--max-message-bytes",
        type=int,
        help="gRPC message limit, either way; every reply is made to fit it (default: 4 MiB)",
    )


def _tls_files(args):
    from controller.runtime.daemon import ConfigError, Listen, TlsFiles

    given = all_or_none(args, ("tls-cert", "tls-key", "tls-ca", "policy"), ConfigError)
    if given is None:
        if args.tokens or args.grpc_token_listen:
            raise ConfigError("tokens", "bearer tokens need TLS", "with --tls-cert, --tls-key, --tls-ca, --policy")
        return None
    token_listen = Listen.parse(args.grpc_token_listen, "grpc-token-listen") if args.grpc_token_listen else None
    cert, key, ca, policy = map(Path, given)
    return TlsFiles(cert, key, ca, policy, Path(args.tokens) if args.tokens else None, token_listen)


def _etcd_tls(args):
    from controller.intent.etcd_store import EtcdTls
    from controller.runtime.daemon import ConfigError

    if not args.etcd_ca:
        if args.etcd_cert or args.etcd_key:
            raise ConfigError("etcd-ca", "missing", "--etcd-cert and --etcd-key go with --etcd-ca")
        return None
    if not args.store.startswith("etcd://"):
        raise ConfigError("etcd-ca", "given without an etcd store", "--store etcd://HOST:PORT/PREFIX")
    if bool(args.etcd_cert) != bool(args.etcd_key):
        raise ConfigError("etcd-cert" if not args.etcd_cert else "etcd-key", "missing", "both, or neither")
    return EtcdTls(args.etcd_ca, args.etcd_cert, args.etcd_key)


def controller_run(args) -> int:
    from controller.intent.etcd_store import EtcdUrl
    from controller.runtime.daemon import DaemonConfig, Listen, run

    config = DaemonConfig(
        store=EtcdUrl.parse(args.store) if args.store.startswith("etcd://") else Path(args.store),
        advertise=str(Listen.parse(args.advertise, "advertise")) if args.advertise else None,
        etcd_tls=_etcd_tls(args),
        hosts=Path(args.hosts) if args.hosts else None,
        extender=Listen.parse(args.extender_listen, "extender-listen") if args.extender_listen else None,
        sflow=Listen.parse(args.sflow_listen, "sflow-listen") if args.sflow_listen else None,
        sflow_agents=Path(args.sflow_agents) if args.sflow_agents else None,
        openflow_stats_s=args.openflow_stats_interval or 0.0,
        underlay=args.underlay,
        southbound=args.southbound,
        openflow=Listen.parse(args.openflow_listen, "openflow-listen"),
        grpc=Listen.parse(args.grpc_listen, "grpc-listen"),
        metrics=Listen.parse(args.metrics_listen, "metrics-listen"),
        reconcile_interval_s=args.reconcile_interval,
        full_audit_every=args.full_audit_every,
        te_enabled=not args.no_te,
        **({} if args.watch_history is None else {"watch_history": args.watch_history}),
        **({} if args.max_message_bytes is None else {"max_message_bytes": args.max_message_bytes}),
        tls=_tls_files(args),
        insecure=args.insecure,
        audit_log=args.audit_log,
        metrics_client_certs=args.metrics_client_certs,
        **({} if args.mutations_per_second is None else {"mutations_per_s": args.mutations_per_second}),
        **(
            {}
            if args.telemetry_records_per_second is None
            else {"telemetry_records_per_s": args.telemetry_records_per_second}
        ),
    )
    return run(load_fabric(args.spec), config)
