"""The live link view as Prometheus series, read at scrape time.

Not in controller/metrics.py's `Metrics`: these series are not counted as
events happen but computed from telemetry's freshest port samples whenever
Prometheus scrapes, so they cost nothing between scrapes.
"""

from __future__ import annotations


class LinkViewCollector:
    """Per switch egress port: utilization, queue and drops, as telemetry reported them."""

    def __init__(self, fabric, ports) -> None:
        self.fabric = fabric
        self.ports = ports
        self.labels = {}
        for name, switch in fabric.switches.items():
            plane = switch.plane if switch.plane is not None else switch.rail
            for port, link in fabric.ports(name).items():
                peer = fabric.switches.get(link.peer(name).node)
                toward = "host" if link.is_access else peer.tier.value if peer else "host"
                self.labels[(name, port)] = [
                    name,
                    str(port),
                    switch.tier.value,
                    toward,
                    "" if plane is None else str(plane),
                ]

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        names = ["switch", "port", "tier", "toward", "plane"]
        util = GaugeMetricFamily(
            "railyard_link_utilization_ratio",
            "Egress utilization from telemetry (tx rate / link capacity)",
            labels=names,
        )
        queue = GaugeMetricFamily("railyard_link_queue_bytes", "Egress queue occupancy from telemetry", labels=names)
        drops = CounterMetricFamily("railyard_link_drops", "Egress queue drops reported by telemetry", labels=names)
        for egress, sample in sorted(self.ports().items()):
            labels = self.labels.get((egress.node, egress.port))
            if labels is None:
                continue
            capacity = self.fabric.link_at(egress).capacity_bps
            util.add_metric(labels, sample.tx_bps / capacity)
            queue.add_metric(labels, sample.queue_bytes)
            drops.add_metric(labels, sample.drops_total)
        yield util
        yield queue
        yield drops
