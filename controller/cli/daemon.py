"""`railyard controller run | check-config`: the daemon's options, from flags
and from an optional configuration file whose keys are the flags' names."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from controller.api.client import DEFAULT_TARGET
from controller.cli.connect import all_or_none
from controller.cli.output import emit
from controller.errors import FieldError
from controller.yamldoc import read_yaml

DEFAULT_STORE = "/var/lib/railyard/intent.db"
DEFAULT_CONFIG = Path("/etc/railyard/railyard.yaml")
CONFIG_ENV = "RAILYARD_CONFIG"
OPENFLOW_LISTEN = "127.0.0.1:6653"
UNDERLAY_ECMP = ("group", "ovs-bundle")  # controller.southbound.underlay.Ecmp, named without importing it
METRICS_LISTEN = "127.0.0.1:8653"  # outside Prometheus's exporter range, which is allocated in full (docs/metrics.md)


class ConfigFileError(FieldError):
    context = "config"


def add_controller_parser(sub) -> None:
    ctl = sub.add_parser("controller", help="the Railyard controller daemon")
    csub = ctl.add_subparsers(dest="controller_cmd", required=True, metavar="COMMAND")
    run = csub.add_parser(
        "run", help="run the daemon (OpenFlow southbound, gRPC API, metrics) until SIGTERM; SIGHUP reloads TLS"
    )
    check = csub.add_parser(
        "check-config",
        help="check the daemon's configuration (file and flags): spec, host map, policy, tokens, certificates; "
        "start nothing",
    )
    for parser in (run, check):
        _daemon_options(parser)
        parser.set_defaults(daemon_parser=parser)
    run.set_defaults(func=controller_run)
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.set_defaults(func=check_config)


def _daemon_options(run) -> None:
    run.add_argument(
        "--config",
        metavar="FILE",
        help=f"YAML whose keys are these flags' names (e.g. grpc-listen: 127.0.0.1:50051); flags override it "
        f"(default {DEFAULT_CONFIG} if it exists; env {CONFIG_ENV})",
    )
    run.add_argument("--spec", help="fabric spec: a YAML path or a shipped spec's name (default: the demo spec)")
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
    _store_and_listener_options(run)
    _tls_options(run)
    _limit_and_log_options(run)


def _store_and_listener_options(run) -> None:
    run.add_argument("--etcd-ca", help="CA etcd's certificate chains to (https to etcd; with --etcd-cert/--etcd-key)")
    run.add_argument("--etcd-cert", help="this controller's client certificate for etcd (PEM)")
    run.add_argument("--etcd-key", help="its private key (PEM)")
    run.add_argument(
        "--openflow-listen", default=OPENFLOW_LISTEN, help=f"OpenFlow listener HOST:PORT (default {OPENFLOW_LISTEN})"
    )
    run.add_argument("--grpc-listen", default=DEFAULT_TARGET, help=f"gRPC API HOST:PORT (default {DEFAULT_TARGET})")
    run.add_argument(
        "--metrics-listen", default=METRICS_LISTEN, help=f"Prometheus /metrics HOST:PORT (default {METRICS_LISTEN})"
    )
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
        "--te-decisions",
        metavar="FILE",
        help="append every TE decision to FILE as a JSON line (kind, flow, link, from_via, to_via, reason)",
    )
    run.add_argument(
        "--watch-history",
        type=int,
        help="job events a WatchJobs from a revision can replay (default: the daemon's, 4096)",
    )


def _tls_options(run) -> None:
    run.add_argument("--tls-cert", help="the API's server certificate (PEM); with --tls-key, --tls-ca, --policy")
    run.add_argument("--tls-key", help="its private key (PEM)")
    run.add_argument("--tls-ca", help="the CA client certificates must chain to (mutual TLS)")
    run.add_argument("--policy", help="YAML: identities (client certificate CNs) -> roles; revoked certificates")
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


def _limit_and_log_options(run) -> None:
    run.add_argument(
        "--mutations-per-second",
        type=float,
        help="a caller's mutations per second, bursts of twice that (default 50); over it: RESOURCE_EXHAUSTED",
    )
    run.add_argument(
        "--telemetry-records-per-second",
        type=float,
        help="telemetry records per second per caller, over all its streams, bursts of as much (default 25000); "
        "a batch up to a quarter second over waits its turn, one further over ends the stream",
    )
    run.add_argument(
        "--telemetry-streams-per-caller",
        type=int,
        help="telemetry streams one caller may hold open at once (default 8)",
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
        nargs="?",
        const="group",
        choices=UNDERLAY_ECMP,
        metavar="ECMP",
        help="install and keep the spec's ECMP underlay (host and prefix routes, equal-cost next hops) on every "
        "switch, under its own cookie owner: for a fabric brought up bare (fabric up --bare) or OpenFlow switches "
        "nothing else routes. ECMP: group (default; OpenFlow select groups, hashed as the switch is configured "
        "to) or ovs-bundle (Open vSwitch's bundle action, which hashes where flow records and sFlow see the port "
        "a flow took: TE needs that on Open vSwitch). Its hash keeps unpinned traffic off the uplinks placed "
        "jobs fill (docs/real-fabrics.md)",
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
    run.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="the daemon's log lines on stderr: timestamped text, or one JSON object each (default text)",
    )


# --- the configuration file --------------------------------------------------


def with_config_file(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The parsed command line; for the daemon's commands, over the values
    of its configuration file (flags win)."""
    args = parser.parse_args(argv)
    daemon_parser = getattr(args, "daemon_parser", None)
    if daemon_parser is None:
        return args
    path = _config_path(args.config)
    if path is None:
        return args
    daemon_parser.set_defaults(**config_values(daemon_parser, path))
    return parser.parse_args(argv)


def _config_path(given: str | None) -> Path | None:
    if given:
        return Path(given)
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    return DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None


def config_values(daemon_parser: argparse.ArgumentParser, path: Path) -> dict[str, Any]:
    """The file's settings as the parser's destinations, each checked like
    the flag it stands for: an unknown key, or a value of the wrong kind,
    names the key."""
    doc = read_yaml(path, ConfigFileError)
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigFileError("<document>", f"{path} must be a mapping of flag names to values", "grpc-listen: ...")
    actions = {
        option[2:]: action
        for action in daemon_parser._actions
        for option in action.option_strings
        if option.startswith("--") and option not in ("--help", "--config", "--json")
    }
    values = {}
    for key, value in doc.items():
        action = actions.get(str(key))
        if action is None:
            raise ConfigFileError(str(key), f"unknown key in {path}", ", ".join(sorted(actions)))
        values[action.dest] = _config_value(str(key), value, action)
    return values


def _config_value(key: str, value: Any, action: argparse.Action) -> Any:
    if isinstance(action, argparse._StoreTrueAction):
        if not isinstance(value, bool):
            raise ConfigFileError(key, f"got {value!r}", "true or false")
        return value
    if action.type in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (action.type is int and value % 1):
            raise ConfigFileError(key, f"got {value!r}", "an integer" if action.type is int else "a number")
        return action.type(value)
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ConfigFileError(key, f"got {value!r}", "a string")
    if action.choices is not None and str(value) not in action.choices:
        raise ConfigFileError(key, f"got {value!r}", ", ".join(action.choices))
    return str(value)


# --- the daemon's configuration from the options ------------------------------


def _tls_files(args):
    from controller.runtime.config import ConfigError, Listen, TlsFiles

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
    from controller.runtime.config import ConfigError

    if not args.etcd_ca:
        if args.etcd_cert or args.etcd_key:
            raise ConfigError("etcd-ca", "missing", "--etcd-cert and --etcd-key go with --etcd-ca")
        return None
    if not args.store.startswith("etcd://"):
        raise ConfigError("etcd-ca", "given without an etcd store", "--store etcd://HOST:PORT/PREFIX")
    if bool(args.etcd_cert) != bool(args.etcd_key):
        raise ConfigError("etcd-cert" if not args.etcd_cert else "etcd-key", "missing", "both, or neither")
    return EtcdTls(args.etcd_ca, args.etcd_cert, args.etcd_key)


def daemon_config(args):
    from controller.intent.etcd_store import EtcdUrl
    from controller.runtime.config import DaemonConfig, Listen
    from controller.southbound.underlay import Ecmp

    return DaemonConfig(
        store=EtcdUrl.parse(args.store) if args.store.startswith("etcd://") else Path(args.store),
        advertise=str(Listen.parse(args.advertise, "advertise")) if args.advertise else None,
        etcd_tls=_etcd_tls(args),
        hosts=Path(args.hosts) if args.hosts else None,
        extender=Listen.parse(args.extender_listen, "extender-listen") if args.extender_listen else None,
        sflow=Listen.parse(args.sflow_listen, "sflow-listen") if args.sflow_listen else None,
        sflow_agents=Path(args.sflow_agents) if args.sflow_agents else None,
        openflow_stats_s=args.openflow_stats_interval or 0.0,
        underlay=Ecmp(args.underlay) if args.underlay else None,
        southbound=args.southbound,
        openflow=Listen.parse(args.openflow_listen, "openflow-listen"),
        grpc=Listen.parse(args.grpc_listen, "grpc-listen"),
        metrics=Listen.parse(args.metrics_listen, "metrics-listen"),
        reconcile_interval_s=args.reconcile_interval,
        full_audit_every=args.full_audit_every,
        te_enabled=not args.no_te,
        te_decisions=Path(args.te_decisions) if args.te_decisions else None,
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
        log_format=args.log_format,
        **(
            {}
            if args.telemetry_streams_per_caller is None
            else {"telemetry_streams_per_caller": args.telemetry_streams_per_caller}
        ),
    )


def controller_run(args) -> int:
    from controller.fabric import load_fabric
    from controller.runtime.daemon import run

    config = daemon_config(args)
    return run(load_fabric(args.spec), config)


def check_config(args) -> int:
    """Everything the daemon reads before it opens a listener, read and
    checked the same way; nothing opened, nothing written."""
    from controller.fabric import load_fabric
    from controller.runtime.listeners import listeners
    from controller.schedulers.hosts import load_hosts

    config = daemon_config(args)
    fabric = load_fabric(args.spec)
    load_hosts(fabric, config.hosts)
    identities = 0
    if config.tls is not None:
        tls = config.tls.load()
        tls.policy.check_switches(frozenset(fabric.switches))
        identities = len(tls.policy.grants)
    report = {
        "ok": True,
        "fabric": fabric.spec.name,
        "store": str(config.store),
        "te": config.te_enabled,
        "tls": config.tls is not None,
        "identities": identities,
        "listeners": dict(listeners(config)),
    }

    def text() -> None:
        print(f"ok: fabric {report['fabric']}, store {report['store']}, TE {'on' if config.te_enabled else 'off'}")
        for name, url in listeners(config):
            print(f"  {name:10s} {url}")

    emit(args.json, report, text)
    return 0
