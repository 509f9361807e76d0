"""The daemon's configuration: every option of `railyard controller run`
(flags, or the configuration file, controller/cli/daemon.py), checked as a
whole before anything opens, each mistake a ConfigError naming its option."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from controller.api.limits import MUTATIONS_PER_S, TELEMETRY_RECORDS_PER_S, TELEMETRY_STREAMS_PER_CALLER
from controller.api.server import MAX_MESSAGE_BYTES, MutualTls
from controller.errors import FieldError
from controller.intent.etcd_store import EtcdTls, EtcdUrl
from controller.intent.events import WATCH_HISTORY
from controller.security.certs import server_files_problem
from controller.security.policy import load_policy
from controller.security.tokens import load_tokens
from controller.southbound.underlay import Ecmp


class ConfigError(FieldError):
    context = "controller"


SOUTHBOUNDS = ("openflow", "none")


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str, field: str) -> Listen:
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError(field, f"{text!r} is not HOST:PORT", "e.g. 127.0.0.1:6653 (port 0-65535)")
        return cls(host.strip("[]"), int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a host name: it may resolve to anything


@dataclass(frozen=True)
class TlsFiles:
    """--tls-cert, --tls-key, --tls-ca and --policy: the API over mutual TLS
    with roles, OpenFlow over TLS (switch certificates chain to the CA), and
    metrics over HTTPS (with client certificates if --metrics-client-certs).
    With --tokens and --grpc-token-listen, a second API listener for clients
    that authenticate by bearer token instead of a certificate."""

    cert: Path
    key: Path
    ca: Path
    policy: Path
    tokens: Path | None = None
    token_listen: Listen | None = None

    def __post_init__(self) -> None:
        if (self.tokens is None) != (self.token_listen is None):
            given, missing = ("tokens", "grpc-token-listen") if self.tokens else ("grpc-token-listen", "tokens")
            raise ConfigError(
                missing, f"missing: --{given} needs it", "both --tokens and --grpc-token-listen, or neither"
            )

    def load(self) -> MutualTls:
        contents = {}
        for flag, path in (("tls-cert", self.cert), ("tls-key", self.key), ("tls-ca", self.ca)):
            try:
                contents[flag] = path.read_bytes()
            except OSError as exc:
                raise ConfigError(flag, f"cannot read {path}: {exc.strerror}", "a readable PEM file") from None
            if b"-----BEGIN " not in contents[flag]:
                raise ConfigError(flag, f"{path} is not PEM", "a PEM file (e.g. from `railyard certs init`)")
        problem = server_files_problem(contents["tls-cert"], contents["tls-key"], contents["tls-ca"])
        if problem is not None:
            flag, what, allowed = problem
            path = {"tls-cert": self.cert, "tls-key": self.key, "tls-ca": self.ca}[flag]
            raise ConfigError(flag, f"{path}: {what}", allowed)
        return MutualTls(
            contents["tls-cert"],
            contents["tls-key"],
            contents["tls-ca"],
            load_policy(self.policy),
            load_tokens(self.tokens) if self.tokens is not None else None,
            str(self.token_listen) if self.token_listen is not None else None,
        )


@dataclass(frozen=True)
class DaemonConfig:
    store: Path | EtcdUrl  # SQLite (one controller) or etcd (replicas, leader election)
    openflow: Listen
    grpc: Listen
    metrics: Listen
    reconcile_interval_s: float = 10.0
    full_audit_every: int = 6  # periodic passes: every switch is read in full once in this many
    reply_timeout_s: float = 5.0
    te_enabled: bool = True  # off: placement and pins only, elephants stay on ECMP
    te_decisions: Path | None = None  # a file every TE decision is appended to, as a JSON line
    watch_history: int = WATCH_HISTORY  # job events a WatchJobs from a revision can replay
    max_message_bytes: int = MAX_MESSAGE_BYTES  # gRPC messages, either way: every reply is made to fit
    tls: TlsFiles | None = None  # the API over mutual TLS, with roles
    insecure: bool = False  # allow plaintext listeners on non-loopback addresses
    audit_log: str | None = None  # a file, or "-" for stderr: one JSON line per mutation and refusal
    metrics_client_certs: bool = False  # with tls: scrapers present a certificate from the CA
    mutations_per_s: float = MUTATIONS_PER_S  # per caller
    telemetry_records_per_s: float = TELEMETRY_RECORDS_PER_S  # per caller, over all its streams
    telemetry_streams_per_caller: int = TELEMETRY_STREAMS_PER_CALLER
    advertise: str | None = None  # with etcd: where clients reach this replica's API (default --grpc-listen)
    etcd_tls: EtcdTls | None = None
    hosts: Path | None = None  # a host map: servers under the scheduler's node names
    extender: Listen | None = None  # the kube-scheduler extender's HTTP(S) listener
    log_format: str = "text"  # or "json": one object per line
    sflow: Listen | None = None  # the sFlow collector's UDP listener
    sflow_agents: Path | None = None  # which sFlow agents are heard, and who they are (default: loopback)
    openflow_stats_s: float = 0.0  # poll port (and meter) statistics this often; 0: never
    underlay: Ecmp | None = None  # install and keep the ECMP underlay (its own cookie owner) on every switch
    # "none": advisory. No OpenFlow listener, nothing programmed; placement and
    # TE run, and TE's moves are recommendations (TeService, metrics).
    southbound: str = "openflow"

    def __post_init__(self) -> None:
        if not 0.1 <= self.mutations_per_s <= 100_000:
            raise ConfigError("mutations-per-second", f"{self.mutations_per_s:g}", "0.1 to 100000")
        if not 1 <= self.telemetry_records_per_s <= 10_000_000:
            raise ConfigError("telemetry-records-per-second", f"{self.telemetry_records_per_s:g}", "1 to 10000000")
        if not 1 <= self.telemetry_streams_per_caller <= 32:
            raise ConfigError("telemetry-streams-per-caller", f"{self.telemetry_streams_per_caller}", "1 to 32")
        if self.metrics_client_certs and self.tls is None:
            raise ConfigError("metrics-client-certs", "needs TLS", "with --tls-cert, --tls-key, --tls-ca, --policy")
        cleartext = [
            (flag, listen)
            for flag, listen, secured in (
                ("grpc-listen", self.grpc, self.tls is not None),
                ("openflow-listen", self.openflow, self.tls is not None),
                ("metrics-listen", self.metrics, self.tls is not None),
                *((("extender-listen", self.extender, self.tls is not None),) if self.extender else ()),
            )
            if not secured and not listen.loopback
        ]
        if cleartext and not self.insecure:
            flag, listen = cleartext[0]
            raise ConfigError(
                flag,
                f"{listen} is not a loopback address and would serve without TLS",
                "a loopback address; for the API, TLS (--tls-cert, --tls-key, --tls-ca, --policy); "
                "or --insecure to serve in the clear anyway",
            )
        if not 0.1 <= self.reconcile_interval_s <= 3600:
            raise ConfigError("reconcile-interval", f"{self.reconcile_interval_s} s", "0.1 to 3600 seconds")
        if not 1 <= self.full_audit_every <= 1000:
            raise ConfigError("full-audit-every", f"{self.full_audit_every} passes", "1 to 1000")
        if not 1 <= self.watch_history <= 1_000_000:
            raise ConfigError("watch-history", f"{self.watch_history} events", "1 to 1000000")
        if not 64 * 1024 <= self.max_message_bytes <= 256 * 1024 * 1024:
            raise ConfigError("max-message-bytes", f"{self.max_message_bytes}", "64 KiB to 256 MiB")
        if self.openflow_stats_s and not 0.1 <= self.openflow_stats_s <= 3600:
            raise ConfigError("openflow-stats-interval", f"{self.openflow_stats_s:g} s", "0 (off), or 0.1 to 3600")
        if self.southbound not in SOUTHBOUNDS:
            raise ConfigError("southbound", f"{self.southbound!r}", ", ".join(SOUTHBOUNDS))
        if self.southbound == "none" and (self.underlay is not None or self.openflow_stats_s):
            flag = "underlay" if self.underlay is not None else "openflow-stats-interval"
            raise ConfigError(
                flag, "needs OpenFlow sessions, and --southbound none opens none", "--southbound openflow"
            )
        if self.sflow_agents is not None and self.sflow is None:
            raise ConfigError("sflow-agents", "given without --sflow-listen", "with --sflow-listen HOST:PORT")
        if self.sflow is not None and not self.sflow.loopback and self.sflow_agents is None:
            raise ConfigError(
                "sflow-agents",
                f"missing: --sflow-listen {self.sflow} is not a loopback address, and without a file only "
                "loopback agents are heard",
                "an agents file naming the networks or agents that may report (see docs/real-fabrics.md)",
            )
