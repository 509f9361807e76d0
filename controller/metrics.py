"""Every Prometheus metric the controller exports, in one place.

Naming per ARCHITECTURE.md (metrics conventions): `railyard_` prefix, base units, counters end in
`_total`. Labels are bounded by the fabric (switch names, fixed enums); never
per flow, pin or IP. Label sets known up front are initialised to zero so
dashboards and alerts see a series before the first event.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from controller.te.engine import DecisionKind

# `_created` series double the exposition and no dashboard or alert reads them.
disable_created_metrics()

FLOW_MOD_KINDS = ("add", "delete")
TE_DECISIONS = tuple(DecisionKind)
RESULTS = ("ok", "failed")
KNOWN_ERRORS = (
    ("southbound", "dump_failed"),
    ("southbound", "openflow_error"),
    ("southbound", "handler_exception"),
    ("southbound", "unknown_dpid"),
    ("southbound", "reconcile_crash"),
    ("intent", "invalid_stored_intent"),
    ("southbound", "meter_mod_failed"),
    ("southbound", "bundle_failed"),
    ("te", "cycle_failed"),
    ("replica", "follower_failed"),
    ("replica", "leadership_failed"),
)
LISTENERS = ("metrics", "extender")


def railyard_version() -> str:
    try:
        return version("railyard")
    except PackageNotFoundError:
        return "unknown"


class Metrics:
    def __init__(self, switches: list[str]) -> None:
        self.registry = r = CollectorRegistry()
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        Gauge("railyard_build_info", "Railyard version running", ["version"], registry=r).labels(
            railyard_version()
        ).set(1)
        self._southbound(r)
        self._intent(r)
        self._api(r)
        self._te(r)
        self._real_fabric(r)
        self.errors = Counter("railyard_errors", "Errors by component and reason", ["component", "reason"], registry=r)
        self.listener_refused = Counter(
            "railyard_listener_refused",
            "Connections to an HTTP listener dropped before a request: a failed TLS handshake, or over the "
            "connection caps (a peer's, or all peers')",
            ["listener", "reason"],
            registry=r,
        )
        for listener in LISTENERS:
            for reason in ("handshake", "too_many"):
                self.listener_refused.labels(listener, reason)
        self.switch_errors = Counter(
            "railyard_switch_errors",
            "Failed OpenFlow exchanges with a switch by kind (timeout, disconnected, refused, unexpected_reply)",
            ["switch", "reason"],
            registry=r,
        )

        for switch in switches:
            self.switch_up.labels(switch).set(0)
            self.entries_desired.labels(switch).set(0)
            self.entries_installed.labels(switch).set(0)
            for mod_kind in FLOW_MOD_KINDS:
                self.flow_mods.labels(switch, mod_kind)
            for result in RESULTS:
                self.bundles.labels(switch, result)
        for component, reason in KNOWN_ERRORS:
            self.errors.labels(component, reason)
        for result in ("accepted", "dropped", "rejected", "clamped"):
            self.telemetry_records.labels(result)

    def _southbound(self, r: CollectorRegistry) -> None:
        """The switches: connections, flow, meter and group mods, reconcile passes, entries."""
        self.switches_connected = Gauge(
            "railyard_switches_connected", "OpenFlow switches of the fabric with a live connection", registry=r
        )
        self.switch_up = Gauge(
            "railyard_switch_up", "1 while the switch has a live OpenFlow connection", ["switch"], registry=r
        )
        self.flow_mods = Counter(
            "railyard_flow_mods", "Overlay flow-mods sent inside committed bundles", ["switch", "kind"], registry=r
        )
        self.meter_mods = Counter(
            "railyard_meter_mods", "Meter mods sent and confirmed by a barrier", ["switch", "kind"], registry=r
        )
        self.group_mods = Counter(
            "railyard_group_mods",
            "Underlay group mods (--underlay) sent and confirmed by a barrier",
            ["switch", "kind"],
            registry=r,
        )
        self.bundles = Counter(
            "railyard_bundle_commits", "OpenFlow bundle commits by outcome", ["switch", "result"], registry=r
        )
        self.reconcile_runs = Counter(
            "railyard_reconcile_runs", "Reconcile passes by trigger and outcome", ["trigger", "result"], registry=r
        )
        self.reconcile_duration = Histogram(
            "railyard_reconcile_duration_seconds",
            "Wall time of one reconcile pass (dump, diff, commit)",
            ["trigger"],
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.reconcile_phase = Histogram(
            "railyard_reconcile_phase_seconds",
            "Wall time of one phase of a reconcile pass: dump (reading switches), plan (desired overlay and "
            "diff), commit (first message sent to the last switch's reply)",
            ["phase"],
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.overlay_drift = Counter(
            "railyard_overlay_drift",
            "Switches found holding other Railyard entries than Railyard committed (edited by hand, "
            "restarted), by how it was found: count (the periodic count check) or dump (a full audit)",
            ["switch", "found_by"],
            registry=r,
        )
        self.last_reconcile_success = Gauge(
            "railyard_last_reconcile_success_timestamp_seconds",
            "Unix time the last reconcile pass finished with every connected switch in sync",
            registry=r,
        )
        self.entries_desired = Gauge(
            "railyard_overlay_entries_desired", "Overlay entries the intent calls for", ["switch"], registry=r
        )
        self.entries_installed = Gauge(
            "railyard_overlay_entries_installed",
            "Railyard-cookie entries the switch holds: read at its last dump, kept by Railyard's own commits since",
            ["switch"],
            registry=r,
        )
        self.jobs_unprogrammed = Gauge(
            "railyard_jobs_unprogrammed",
            "Placed jobs whose entries are not yet on every switch they use (accepted, not yet PROGRAMMED)",
            registry=r,
        )

    def _intent(self, r: CollectorRegistry) -> None:
        """The intent and its store, leadership."""
        self.intent_objects = Gauge("railyard_intent_objects", "Objects in the intent store", ["kind"], registry=r)
        self.leader = Gauge(
            "railyard_leader",
            "1 while this replica leads (reconciles, runs TE, takes mutations); 0 following",
            registry=r,
        )
        self.leader_changes = Counter(
            "railyard_leader_changes", "Times this replica became or stopped being the leader", registry=r
        )
        self.leader_key_leaseless = Gauge(
            "railyard_leader_key_leaseless",
            "1 while the store's leader key has no lease: no replica can lead until it is deleted "
            "(docs/high-availability.md)",
            registry=r,
        )
        self.intent_unreadable = Gauge(
            "railyard_intent_unreadable",
            "1 while a value in the intent store does not read (named in the log): this replica serves the "
            "intent it last read and does not lead",
            registry=r,
        )
        self.watch_history = Gauge(
            "railyard_watch_history",
            "What WatchJobs can replay: job events, and items (GPUs plus flows of their jobs); bounded by"
            " --watch-history events and 262,144 items",
            ["unit"],
            registry=r,
        )
        self.intent_revision = Gauge(
            "railyard_intent_revision",
            "The intent revision this replica holds (followers trail the leader's)",
            registry=r,
        )
        self.store_latency = Histogram(
            "railyard_store_request_seconds",
            "Intent store requests: etcd range, txn and lease; SQLite commit (its fsync included)",
            ["op"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        )
        self.store_errors = Counter(
            "railyard_store_errors",
            "Intent store requests that failed: etcd, no endpoint answered or etcd refused; SQLite, a commit",
            ["op"],
            registry=r,
        )
        for op in ("range", "txn", "lease", "commit"):  # exported from the start, whatever the store
            self.store_latency.labels(op)
            self.store_errors.labels(op)

    def _api(self, r: CollectorRegistry) -> None:
        """The API: requests, refusals, latency, telemetry, jobs."""
        self.api_requests = Counter(
            "railyard_api_requests", "gRPC requests by method and status code", ["method", "code"], registry=r
        )
        self.api_denied = Counter(
            "railyard_api_denied",
            "gRPC calls refused before they ran: UNAUTHENTICATED (no client identity) or PERMISSION_DENIED "
            "(an identity without a role, or a role that may not call the method)",
            ["method", "code"],
            registry=r,
        )
        self.api_rate_limited = Counter(
            "railyard_api_rate_limited",
            "Calls refused for going over a rate: a caller's mutations, or a telemetry stream's records",
            ["method"],
            registry=r,
        )
        self.api_latency = Histogram(
            "railyard_api_request_duration_seconds",
            "gRPC request handling time",
            ["method"],
            registry=r,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )
        self.telemetry_records = Counter(
            "railyard_telemetry_records",
            "Telemetry records by outcome (accepted; dropped: queue full; rejected: unknown switch, port or NIC, "
            "or a bad value; clamped: dated more than 1 s after arrival, so re-dated to arrival + 1 s)",
            ["result"],
            registry=r,
        )
        self.jobs_active = Gauge("railyard_jobs_active", "Placed jobs", registry=r)
        self.gpus_allocated = Gauge("railyard_gpus_allocated", "GPUs held by placed jobs", ["pod", "rail"], registry=r)
        self.predicted_max_utilization = Gauge(
            "railyard_predicted_max_link_utilization_ratio",
            "Max link utilization the placed jobs' demands predict",
            registry=r,
        )

    def _te(self, r: CollectorRegistry) -> None:
        """Adaptive TE: decisions, moves, meters, caches, cycle and reaction time."""
        self.te_decisions = Counter(
            "railyard_te_decisions",
            "Adaptive TE decisions by kind (collision found, elephant rerouted, incast found, move expired)",
            ["kind"],
            registry=r,
        )
        self.te_moves_active = Gauge(
            "railyard_te_moves_active", "Elephants currently steered by adaptive TE", registry=r
        )
        self.te_meters_active = Gauge(
            "railyard_te_meters_active", "Incast senders' flows currently metered at their ingress leaf", registry=r
        )
        self.te_cache_entries = Gauge(
            "railyard_te_cache_entries",
            "Entries in the TE engine's caches: route-table rows (leaf pairs asked for) and flow keys;"
            " each starts over once past 4x what the live view needs",
            ["cache"],
            registry=r,
        )
        self.te_cache_restarts = Counter(
            "railyard_te_cache_restarts", "Times the TE engine's caches started over from the live view", registry=r
        )
        self.te_cycle = Histogram(
            "railyard_te_cycle_seconds",
            "Wall time of one adaptive TE cycle (snapshot, engine step, hand-over to the reconciler)",
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.te_reaction = Histogram(
            "railyard_te_reaction_seconds",
            "From a reroute decision to its entries committed on the switches",
            registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 5),
        )
        self.te_moves_by_via = Gauge(
            "railyard_te_moves_by_via",
            "Elephants TE holds on each via (spine or core) now; with --southbound none, the moves it recommends",
            ["via"],
            registry=r,
        )

    def _real_fabric(self, r: CollectorRegistry) -> None:
        """Telemetry from the switches (sFlow, OpenFlow statistics) and advisory mode."""
        self.southbound_programs = Gauge(
            "railyard_southbound_programs",
            "1 when the controller programs the switches; 0 in advisory mode (--southbound none): TE's moves are "
            "recommendations only",
            registry=r,
        )
        for kind in TE_DECISIONS:
            self.te_decisions.labels(kind)
        self.sflow_datagrams = Counter(
            "railyard_sflow_datagrams",
            "sFlow datagrams by outcome: accepted; refused before decoding (rate_limited, queue_full); malformed "
            "(truncated, version, address_type, sample_count, record_count, length, sampling_rate); refused after "
            "(unknown_agent, sequence: a repeat or a replay)",
            ["result"],
            registry=r,
        )
        self.sflow_samples = Counter(
            "railyard_sflow_samples",
            "Samples of accepted sFlow datagrams by outcome: accepted; unbound (the agent has not yet named its "
            "switch or the ifIndex); unknown_port; not_fabric (not between two NICs of the fabric); "
            "flow_table_full",
            ["result"],
            registry=r,
        )
        self.sflow_datagrams.labels("accepted")  # the collector adds its refusals' reasons when it runs
        self.sflow_lost = Counter(
            "railyard_sflow_lost_datagrams",
            "sFlow datagrams an agent's sequence numbers say never arrived",
            registry=r,
        )
        self.sflow_flows = Gauge("railyard_sflow_flows", "Flows the sFlow collector tracks", registry=r)
        self.sflow_error_bound = Histogram(
            "railyard_sflow_estimate_error_ratio",
            "95 % relative error bound of each flow rate the sFlow collector reports (1.96 / sqrt(samples))",
            registry=r,
            buckets=(0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 1.0),
        )
        self.stats_polls = Counter(
            "railyard_openflow_stats_polls",
            "Port-statistics requests to switches over the controller's OpenFlow sessions, by outcome",
            ["result"],
            registry=r,
        )
        self.stats_poll_duration = Histogram(
            "railyard_openflow_stats_poll_seconds",
            "Wall time of one round of OpenFlow statistics over every connected switch",
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.meter_band_packets = Gauge(
            "railyard_meter_band_packets",
            "Packets Railyard's meters on the switch have dropped (incast senders policed), from meter statistics",
            ["switch"],
            registry=r,
        )
