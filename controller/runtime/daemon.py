"""`railyard controller run`: one process with the OpenFlow southbound (os-ken,
native hub), the gRPC API and the metrics endpoint.

Startup order matters for a hitless restart: intent is loaded from the store
before the OpenFlow listener opens, so the first reconcile of a reconnecting
switch already knows every pin and finds nothing to change.
"""

from __future__ import annotations

import os

os.environ.setdefault("OSKEN_HUB_TYPE", "native")  # eventlet would deadlock grpcio

import contextlib
import faulthandler
import gc
import logging
import signal
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

from os_ken.base import app_manager

from controller.api.audit import AuditLog
from controller.api.extender import ExtenderServer
from controller.api.listener import CannotListen, bind_problem
from controller.api.refusals import OneLinePeerFailures
from controller.api.server import ApiServer
from controller.api.te import DecisionFeed
from controller.errors import FieldError, HostError
from controller.fabric import Fabric
from controller.intent.etcd_store import EtcdIntentStore, EtcdKv, EtcdUrl
from controller.intent.service import IntentService
from controller.intent.store import IntentStore, SqliteIntentStore
from controller.metrics import Metrics, railyard_version
from controller.runtime import collector, heap, logs, notify
from controller.runtime.config import ConfigError, DaemonConfig, Listen
from controller.runtime.ha import Replication
from controller.runtime.listeners import listeners
from controller.runtime.metrics_listener import MetricsListener
from controller.runtime.reload import reload_tls
from controller.runtime.te_feed import moves_by_via, publisher
from controller.runtime.te_runner import TeRunner
from controller.schedulers.hosts import HostMap, load_hosts
from controller.southbound.app import OpenFlowTls, start_openflow
from controller.southbound.overlay import meter_ids
from controller.southbound.reconciler import Reconciler, ReconcileTrigger
from controller.southbound.stats import StatsPoller
from controller.telemetry import priority
from controller.telemetry.ingest import Batch, Overloaded, TelemetryIngest
from controller.telemetry.link_view import LinkViewCollector
from controller.telemetry.sflow_agents import load_agents
from controller.telemetry.sflow_collector import SflowCollector
from controller.telemetry.sflow_fold import AgentPolicy

log = logging.getLogger("railyard")


T = TypeVar("T")
LISTEN_ALLOWED = "a HOST:PORT free on this host (another process may hold it: `ss -ltnp`)"


def listening(flag: str, listen: Listen, open_it: Callable[..., T], *args, **kwargs) -> T:
    """`open_it(*args, **kwargs)`, a listener on `listen`; a port it cannot
    have is a ConfigError naming `flag` and why (libraries say only "failed
    to bind")."""
    try:
        return open_it(*args, **kwargs)
    except (OSError, RuntimeError, CannotListen) as exc:
        where = str(listen)
        if isinstance(exc, CannotListen):  # the API's token listener names itself
            flag, where = exc.flag, exc.address
        host, _, port = where.rpartition(":")
        why = bind_problem(host.strip("[]"), int(port)) if port.isdigit() else ""
        why = why or getattr(exc, "strerror", None) or (str(exc).splitlines() or ["unknown"])[0]
        raise ConfigError(flag, f"cannot listen on {where}: {why}", LISTEN_ALLOWED) from None


class Daemon:
    """Built in stages whose order is the start-up's: anything that can refuse
    the configuration (the hosts map, a store, a file, a port) does so before
    the OpenFlow listener opens, and a refusal changes nothing."""

    def __init__(self, fabric: Fabric, config: DaemonConfig) -> None:
        self.fabric = fabric
        self.config = config
        hosts = load_hosts(fabric, config.hosts)  # before anything is opened: a bad map changes nothing
        fabric.warm()  # the fabric's lookups (O(links), ~0.1 s at 16k GPUs): here, not in the first PlaceJob
        # The fabric model lives as long as the process: moving it out of the
        # collector's generations keeps full GC passes (which would walk its
        # hundreds of thousands of objects) off the API's latency tail.
        gc.freeze()
        self.metrics = Metrics(sorted(fabric.switches))
        etcd = self._open_store(config)
        self.ingest = TelemetryIngest(self.metrics)
        # Exports the live link view at scrape time, labelled by the fabric's own
        # switch, port, tier and plane (bounded by its size).
        self.metrics.registry.register(LinkViewCollector(fabric, self.ingest.fresh_ports))
        self.sflow = self._sflow_collector(config) if config.sflow is not None else None
        self.intent = IntentService(
            fabric, self.store, self.metrics, live_load=self.ingest.fresh_load, watch_history=config.watch_history
        )
        self.ingest.on_load(self.intent.index_load)
        self._southbound(config)
        self._adaptive_te(config)
        self._listeners(config, hosts)
        self.replication: Replication | None = None
        if etcd is None:
            self.metrics.leader.set(1)  # a lone controller leads
            self.api.set_leader(True)
        else:
            address = config.advertise or str(config.grpc)
            self.replication = Replication(etcd, address, self.intent, self.reconciler, self.te, self.metrics, self.api)
        if config.insecure:
            for name, listen in (("gRPC", config.grpc), ("OpenFlow", config.openflow), ("metrics", config.metrics)):
                if not listen.loopback and config.tls is None:
                    log.warning("INSECURE (--insecure): %s listens on %s in the clear", name, listen)
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._apps: app_manager.AppManager | None = None
        # Likewise what was just built: the intent loaded from the store, the
        # metrics' label sets. Full passes then walk only what placements add
        # later; at 16k GPUs each pass is a PlaceJob that waits for it.
        gc.freeze()

    def _open_store(self, config: DaemonConfig) -> EtcdIntentStore | None:
        """The intent store; the etcd one, if that is it (replicas elect a leader on it)."""
        self.store: IntentStore
        if isinstance(config.store, EtcdUrl):
            kv = EtcdKv(config.store, config.etcd_tls, observe=self._observe_store)
            self.store = etcd = EtcdIntentStore(kv)
            return etcd
        self.store = SqliteIntentStore(config.store, observe=self._observe_store)
        return None

    def _southbound(self, config: DaemonConfig) -> None:
        """The reconciler, and the OpenFlow statistics poller that shares its sessions."""
        self.reconciler = Reconciler(
            self.fabric,
            self.intent,
            self.metrics,
            config.reconcile_interval_s,
            config.reply_timeout_s,
            audit_every=config.full_audit_every,
            underlay=config.underlay,
        )
        self.stats: StatsPoller | None = None
        if config.openflow_stats_s:
            self.stats = StatsPoller(
                self.fabric, self.reconciler.sessions, self.metrics, self._port_samples, config.openflow_stats_s
            )
            self.reconciler.on_port_status = self.stats.port_status

    def _adaptive_te(self, config: DaemonConfig) -> None:
        """The TE runner, wired to the reconciler (unless advisory), the decision feed and the metrics."""
        fabric = self.fabric
        self.programs = config.southbound != "none"
        try:
            self.te = TeRunner(
                fabric,
                self.ingest,
                self.intent,
                self.metrics,
                enabled=config.te_enabled,
                decisions_file=config.te_decisions,
                programs=self.programs,
            )
        except OSError as exc:
            raise ConfigError(
                "te-decisions", f"cannot open {config.te_decisions}: {exc.strerror}", "a writable file"
            ) from None
        self.reconciler.te = self.te
        self.decisions = DecisionFeed()
        self.te.on_decisions(publisher(self.decisions, programmed=self.programs))
        by_via = moves_by_via(fabric, self.metrics, self.te.plan)
        by_via()  # every via's series from the start, at 0

        def te_changed() -> None:
            by_via()
            if self.programs:  # advisory: nothing to program, the moves are recommendations
                self.reconciler.request(ReconcileTrigger.TE)

        self.te.on_change(te_changed)
        self.metrics.southbound_programs.set(1 if self.programs else 0)
        if self.stats is not None:
            self.stats.metered = lambda: {leaf for leaf, _ in meter_ids(fabric, self.te.plan()[2]).values()}

    def _listeners(self, config: DaemonConfig, hosts: HostMap) -> None:
        """The gRPC API, the scheduler extender and the metrics endpoint, each
        on its port; the OpenFlow port is only checked here (it opens in start)."""
        tls = config.tls.load() if config.tls is not None else None
        if tls is not None:
            tls.policy.check_switches(frozenset(self.fabric.switches))
        try:
            audit = AuditLog.open(config.audit_log) if config.audit_log else None
        except OSError as exc:
            raise ConfigError(
                "audit-log", f"cannot open {config.audit_log}: {exc.strerror}", "a writable file, or -"
            ) from None
        self.api = listening(
            "grpc-listen",
            config.grpc,
            ApiServer,
            self.intent,
            self.ingest,
            self.metrics,
            self.reconciler.connected,
            str(config.grpc),
            message_bytes=config.max_message_bytes,
            tls=tls,
            audit=audit,
            mutations_per_s=config.mutations_per_s,
            telemetry_records_per_s=config.telemetry_records_per_s,
            hosts=hosts,
            telemetry_streams_per_caller=config.telemetry_streams_per_caller,
            decisions=self.decisions,
        )
        self.extender: ExtenderServer | None = None
        if config.extender is not None:
            self.extender = listening(
                "extender-listen",
                config.extender,
                ExtenderServer,
                self.intent,
                hosts,
                self.metrics,
                config.extender.host,
                config.extender.port,
                tls,
                *((str(config.tls.cert), str(config.tls.key), str(config.tls.ca)) if config.tls else ()),
            )
        self.metrics_listener = listening(
            "metrics-listen",
            config.metrics,
            MetricsListener,
            self.metrics,
            config.metrics.host,
            config.metrics.port,
            self.dead,
            self.ingest.priority,
            certfile=str(config.tls.cert) if config.tls is not None else None,
            keyfile=str(config.tls.key) if config.tls is not None else None,
            client_cafile=str(config.tls.ca) if config.tls is not None and config.metrics_client_certs else None,
        )
        problem = bind_problem(config.openflow.host, config.openflow.port)
        if problem:
            raise ConfigError("openflow-listen", f"cannot listen on {config.openflow}: {problem}", LISTEN_ALLOWED)

    def _port_samples(self, samples) -> None:
        with contextlib.suppress(Overloaded):  # the ingest counts it; the next poll is newer
            self.ingest.submit(Batch(ports=tuple(samples)))

    def _sflow_collector(self, config: DaemonConfig) -> SflowCollector:
        assert config.sflow is not None
        policy = load_agents(config.sflow_agents, self.fabric) if config.sflow_agents else AgentPolicy()
        try:
            return SflowCollector(self.fabric, self.ingest, self.metrics, config.sflow.host, config.sflow.port, policy)
        except OSError as exc:
            raise ConfigError("sflow-listen", f"cannot listen on udp {config.sflow}: {exc.strerror}") from None

    def start(self) -> None:
        collector.tune(self._stop)
        heap.tune(self._stop)
        self.metrics.registry.register(heap.HeapCollector())
        priority.short_turns()
        self.ingest.start()
        if self.sflow is not None:
            self.sflow.start()
        if self.programs:
            self.reconciler.start()
        if self.stats is not None:
            self.stats.start()
        self.te.start()
        tls = self.config.tls
        openflow_tls = OpenFlowTls(tls.key, tls.cert, tls.ca) if tls is not None else None
        logging.getLogger("os_ken.lib.hub").addFilter(OneLinePeerFailures("openflow"))  # handshakes: one line
        if self.programs:
            self._apps = start_openflow(
                self.reconciler, self.config.openflow.host, self.config.openflow.port, openflow_tls
            )
        self.api.start()
        if self.extender is not None:
            self.extender.start()
        if self.replication is not None:
            self.replication.start()
        self.metrics_listener.start()  # last: its liveness answer checks the threads started above
        # The API is ready now: intent was loaded when the daemon was built.
        # The fabric's own health name waits until every switch holds its entries.
        self.api.set_serving(True)
        threading.Thread(target=self._fabric_ready, name="health", daemon=True).start()
        log.info(
            "railyard controller %s: fabric %s (%d switches), intent revision %d; listening: %s",
            railyard_version(),
            self.fabric.spec.name,
            len(self.fabric.switches),
            self.intent.snapshot().revision,
            ", ".join(f"{name} {url}" for name, url in listeners(self.config)),
        )
        notify.ready(f"serving fabric {self.fabric.spec.name}")

    def dead(self) -> str:
        """What the daemon needs and no longer runs ("" while all runs): the liveness probe's answer."""
        threads = {thread.name for thread in threading.enumerate() if thread.is_alive()}
        needed = ["telemetry", "reconciler"]
        if self.config.te_enabled:
            needed.append("te")
        if self.replication is not None:
            needed += ["election", "leadership", "follower-sync"]
        return ", ".join(name for name in needed if name not in threads)

    def _observe_store(self, op: str, seconds: float, ok: bool) -> None:
        self.metrics.store_latency.labels(op).observe(seconds)
        if not ok:
            self.metrics.store_errors.labels(op).inc()

    def _fabric_ready(self) -> None:
        if not self.programs:
            self.api.set_fabric_ready(True)  # advisory: nothing to program, nothing to wait for
            log.info("railyard controller: advisory (--southbound none): TE recommends, nothing is programmed")
            return
        while not self._stop.is_set():
            if self.reconciler.fabric_ready.wait(timeout=0.5):
                self.api.set_fabric_ready(True)
                log.info("railyard controller: every switch connected and reconciled")
                return

    def wait(self) -> None:
        """Until SIGTERM; a SIGHUP in between reloads TLS, here rather than in the handler."""
        while not self._stop.is_set():
            if self._reload.wait(timeout=0.5):
                self._reload.clear()
                self.reload()

    def request_stop(self, *_args) -> None:
        self._stop.set()

    def request_reload(self, *_args) -> None:
        self._reload.set()

    def reload(self) -> bool:
        tls = self.config.tls
        if tls is None:
            log.info("SIGHUP: the API runs without TLS: no policy, tokens or certificates to reload")
            return False
        notify.reloading()
        servers = [self.metrics_listener.httpd, *([self.extender.httpd] if self.extender else [])]
        https = [server.tls for server in servers if server.tls is not None]
        done = reload_tls(tls, self.fabric, self.api, https, (str(tls.cert), str(tls.key)))
        notify.ready("reloaded" if done else "reload refused; the previous configuration is in force")
        return done

    def shutdown(self) -> None:
        """Graceful stop. Switch tables are left as they are: fail_mode=secure
        keeps them forwarding, and the next controller finds them correct."""
        log.info("railyard controller: shutting down")
        notify.stopping()
        if self.replication is not None:
            self.replication.stop()  # resigns: another replica leads without waiting out the lease
        self.api.stop(grace_s=2)
        if self.extender is not None:
            self.extender.stop()
        self.te.stop()
        if self.stats is not None:
            self.stats.stop()
        self.reconciler.stop()
        if self.sflow is not None:
            self.sflow.stop()
        self.ingest.stop()
        self.store.close()


def run(fabric: Fabric, config: DaemonConfig) -> int:
    logs.configure(config.log_format, logging.getLogger().getEffectiveLevel())
    daemon = Daemon(fabric, config)
    # `kill -USR1 <pid>` writes every thread's stack to the log: the first
    # thing to look at when a switch or the API seems stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    signal.signal(signal.SIGTERM, daemon.request_stop)
    signal.signal(signal.SIGINT, daemon.request_stop)
    signal.signal(signal.SIGHUP, daemon.request_reload)
    try:
        daemon.start()
    except (OSError, FieldError, HostError) as exc:  # a listener lost to a race since it was checked
        print(f"railyard: {exc}", file=sys.stderr)
        os._exit(2)
    daemon.wait()
    daemon.shutdown()
    logging.shutdown()
    # os-ken's listener and per-switch threads are non-daemon and cannot be
    # stopped (the native hub has no kill); everything durable is already
    # committed, so leave without waiting for them.
    os._exit(0)
