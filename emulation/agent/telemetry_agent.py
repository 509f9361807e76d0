"""Telemetry agent: what an INT/CSIG-capable fabric would report, read off the
emulation, streamed to the controller's TelemetryService.

Every ~100 ms it samples each switch egress port: transmitted bytes (the
veth's kernel counter: the userspace switch transmits through it), and the
port's egress queue, which in this emulation is the pfifo under the HTB
class (two, summed, with ACK priority): its backlog and drops are the real
queue. From those it sends:

- INT-MD-like hop records per egress port (rate, queue, drops);
- CSIG-like path signals per leaf -> spine -> leaf path: compare-and-replace
  along the path of available bandwidth and queue, with the bottleneck's
  location;
- flow records measured in the fabric, not taken from any scenario: the
  datapath flows (`ovs-appctl dpctl/dump-flows`) that enter at a leaf's
  server port, with their byte counters.

Rates are reported in the model's real units (a 50 Mb/s emulated link of a
400 Gb/s fabric reports 400 Gb/s when full), as the controller plans in them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import grpc

from controller.api.client import Client, split_targets
from controller.api.gen.railyard.v1 import common_pb2
from controller.api.gen.railyard.v1 import telemetry_pb2 as tpb
from controller.fabric import Endpoint, Fabric, Tier
from controller.fabric import addressing as ad

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.1
QUEUED_BATCHES = 50  # per target: 5 s of batches at the default interval
SYS_NET = Path("/sys/class/net")
PROTOCOLS = {"tcp": common_pb2.PROTOCOL_TCP, "udp": common_pb2.PROTOCOL_UDP}


@dataclass(frozen=True)
class PortCounters:
    tx_bytes: int
    queue_bytes: int
    drops: int
    up: bool = True


@dataclass(frozen=True)
class FlowCounters:
    src: str
    dst: str
    protocol: str
    src_port: int
    dst_port: int
    bytes: int
    out_intf: str = ""  # where the switch sent it: the ingress leaf's uplink choice, or a transit switch's
    transit: bool = False  # counted at a second hashing switch (a three-tier spine), not where it entered


def read_queues() -> dict[str, tuple[int, int]]:
    """Interface -> (backlog bytes, drops) of its egress queue (parse_queues)."""
    return parse_queues(
        subprocess.run(["tc", "-s", "-j", "qdisc", "show"], capture_output=True, text=True, check=True).stdout
    )


def parse_queues(tc_json: str) -> dict[str, tuple[int, int]]:
    """Interface -> (backlog bytes, drops) of its egress queue, from `tc -s -j
    qdisc show`: the pfifo under HTB, or with ACK priority
    (emulation/net/links.py) both of its pfifos, summed."""
    queues: dict[str, tuple[int, int]] = {}
    for qdisc in json.loads(tc_json or "[]"):
        if qdisc.get("kind") == "pfifo" and not qdisc.get("root"):
            backlog, drops = queues.get(qdisc["dev"], (0, 0))
            queues[qdisc["dev"]] = (backlog + int(qdisc.get("backlog", 0)), drops + int(qdisc.get("drops", 0)))
    return queues


_DP_PORT = re.compile(r"port (\d+): (\S+)")
_FIELD = re.compile(r"(ipv4|tcp|udp)\(([^)]*)\)")


def datapath_ports() -> dict[int, str]:
    out = subprocess.run(["ovs-appctl", "dpctl/show"], capture_output=True, text=True, check=True).stdout
    return {int(n): name for n, name in _DP_PORT.findall(out)}


def parse_dp_flow(line: str, ports: dict[int, str]) -> tuple[str, FlowCounters] | None:
    """(ingress interface, counters) of one datapath flow line; None if not IPv4 TCP/UDP."""
    match, _, stats = line.partition(", packets:")  # the actions (e.g. set(ipv4(ttl=..))) come after
    in_port = re.search(r"in_port\((\d+)\)", match)
    nbytes = re.search(r"bytes:(\d+)", stats)
    if not in_port or not nbytes:
        return None
    fields = {
        kind: dict(kv.split("=", 1) for kv in body.split(",") if "=" in kv) for kind, body in _FIELD.findall(match)
    }
    ip = fields.get("ipv4")
    if not ip or "dst" not in ip:
        return None
    # The L4 key names it when ports were matched; else the IP protocol number.
    proto = next((p for p in ("tcp", "udp") if p in fields), {"6": "tcp", "17": "udp"}.get(ip.get("proto", ""), ""))
    l4 = fields.get(proto, {})

    def port(value: str) -> int:
        return int(value) if value.isdigit() else 0  # absent or masked: unknown

    out = stats.rsplit("actions:", 1)[-1].rsplit(",", 1)[-1].strip()
    return ports.get(int(in_port.group(1)), ""), FlowCounters(
        ip.get("src", "").split("/")[0],
        ip["dst"].split("/")[0],
        proto,
        port(l4.get("src", "")),
        port(l4.get("dst", "")),
        int(nbytes.group(1)),
        ports.get(int(out), "") if out.isdigit() else "",
    )


class FabricSampler:
    """Reads the raw counters of the emulated fabric (I/O only)."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.ports = {
            Endpoint(name, port): ad.switch_port_name(name, port)
            for name in fabric.switches
            for port in fabric.ports(name)
        }
        # A flow is counted where it enters the fabric: a leaf's server-facing
        # port, which also names the sending NIC. The leaf's local delivery
        # matches on the destination alone, so the datapath wildcards a flow
        # between two NICs of one leaf down to (source port, destination,
        # protocol): its source comes from the port, its L4 ports stay unknown.
        self.ingress = {ad.switch_port_name(*fabric.attachment(n)): ad.nic_ip(n) for n in fabric.nics}
        self.port_of = {intf: egress for egress, intf in self.ports.items()}
        # Where a flow is hashed a second time: into a switch above the leaves
        # from below, and out of it further up (a three-tier spine towards a
        # core, a fat tree's aggregation switch towards a core). Its choice
        # there is what the ingress leaf's port cannot tell.
        self.transit_in: set[str] = set()
        self.transit_out: set[str] = set()
        for egress, intf in self.ports.items():
            here = fabric.switch(egress.node)
            link = fabric.ports(egress.node)[egress.port]
            if here.tier is Tier.LEAF or link.is_access:
                continue
            there = fabric.switch(link.peer(egress.node).node)
            (self.transit_in if there.tier.level < here.tier.level else self.transit_out).add(intf)
        self._dp_ports: dict[int, str] = {}

    def ports_now(self) -> dict[Endpoint, PortCounters]:
        queues = read_queues()
        out = {}
        for egress, intf in self.ports.items():
            try:
                tx = int((SYS_NET / intf / "statistics" / "tx_bytes").read_text())
                up = (SYS_NET / intf / "operstate").read_text().strip() == "up"
            except OSError:
                continue  # the fabric is going down
            backlog, drops = queues.get(intf, (0, 0))
            out[egress] = PortCounters(tx, backlog, drops, up)
        return out

    def flows_now(self) -> list[FlowCounters]:
        out = subprocess.run(["ovs-appctl", "dpctl/dump-flows"], capture_output=True, text=True).stdout
        flows, refreshed = [], False
        for line in out.splitlines():
            parsed = parse_dp_flow(line, self._dp_ports)
            if parsed is not None and not parsed[0] and not refreshed:
                self._dp_ports, refreshed = datapath_ports(), True  # ports we have not seen yet
                parsed = parse_dp_flow(line, self._dp_ports)
            if parsed is None:
                continue
            intf, counters = parsed
            if intf in self.ingress:
                flows.append(counters if counters.src else replace(counters, src=self.ingress[intf]))
            elif intf in self.transit_in and counters.out_intf in self.transit_out and counters.src_port:
                flows.append(replace(counters, transit=True))
        return flows


class TelemetryCollector:
    """Turns successive raw samples into telemetry messages. Pure apart from the sampler."""

    def __init__(self, fabric: Fabric, sampler: FabricSampler) -> None:
        self.fabric = fabric
        self.sampler = sampler
        self._last_ports: tuple[float, dict[Endpoint, PortCounters]] | None = None
        self._last_flows: dict[tuple, tuple[float, int]] = {}
        self._last_flow_dump: float | None = None
        self._paths = self._leaf_paths()

    def _leaf_paths(self) -> list[tuple[str, str, str, tuple[Endpoint, ...]]]:
        """(src leaf, via, dst leaf, the switch egresses between them) for every leaf pair of a plane."""
        reps = {}
        for leaf in self.fabric.switches_in(Tier.LEAF):
            nics = self.fabric.local_nics(leaf.name)
            if nics:
                reps[leaf.name] = next(iter(nics.values()))
        out = []
        for a, src in reps.items():
            for b, dst in reps.items():
                if a == b:
                    continue
                for via in self.fabric.vias(src, dst):
                    out.append((a, via, b, self.fabric.egress_path(src, dst, via)[1:-1]))
        return out

    def _scale(self, egress: Endpoint) -> float:
        link = self.fabric.link_at(egress)
        return link.capacity_bps / link.emulated_bps

    def batch(self, now: float) -> tpb.TelemetryBatch:
        ports = self.sampler.ports_now()
        batch = tpb.TelemetryBatch()
        previous = self._last_ports
        self._last_ports = (now, ports)
        if previous is None:
            return batch
        then, before = previous
        dt = max(now - then, 1e-3)
        rates: dict[Endpoint, float] = {}
        for egress, counters in ports.items():
            prior = before.get(egress)
            if prior is None:
                continue
            delta = counters.tx_bytes - prior.tx_bytes
            rates[egress] = max(delta, 0) * 8 / dt * self._scale(egress)
            hop = batch.hops.add(
                switch=egress.node,
                egress_port=egress.port,
                tx_bps=rates[egress],
                queue_bytes=counters.queue_bytes,
                tx_bytes_total=counters.tx_bytes,
                drops_total=counters.drops,
                link_down=not counters.up,
            )
            hop.observe_time.FromNanoseconds(int(now * 1e9))
        for src_leaf, via, dst_leaf, hops in self._paths:
            if not all(h in rates for h in hops):
                continue
            available = {h: self.fabric.link_at(h).capacity_bps - rates[h] for h in hops}
            bottleneck = min(hops, key=lambda h: available[h])
            sig = batch.paths.add(
                src_leaf=src_leaf,
                spine=via,
                dst_leaf=dst_leaf,
                min_available_bps=max(available[bottleneck], 0.0),
                max_queue_bytes=max(ports[h].queue_bytes for h in hops),
                bottleneck_switch=bottleneck.node,
                bottleneck_port=bottleneck.port,
            )
            sig.observe_time.FromNanoseconds(int(now * 1e9))
        self._add_flows(batch, now)
        return batch

    def _add_flows(self, batch: tpb.TelemetryBatch, now: float) -> None:
        seen: dict[tuple, tuple[float, int]] = {}
        egress: dict[tuple, Endpoint] = {}
        scale = self.fabric.spec.rates.nic_gbps * 1e9 / (self.fabric.spec.rates.emulated_nic_mbps * 1e6)
        transit: dict[tuple, Endpoint] = {}
        for flow in self.sampler.flows_now():
            key = (flow.src, flow.dst, flow.protocol, flow.src_port, flow.dst_port)
            if flow.transit:
                transit[key] = self.sampler.port_of[flow.out_intf]
                continue
            total = seen.get(key, (now, 0))[1] + flow.bytes  # megaflows of one 5-tuple add up
            seen[key] = (now, total)
            if flow.out_intf in self.sampler.port_of:
                egress[key] = self.sampler.port_of[flow.out_intf]
        for key, (_, total) in seen.items():
            then, before = self._last_flows.get(key, (self._last_flow_dump, 0))
            if then is None or total < before:
                continue  # the first dump, or the datapath flow was replaced: no rate yet
            rate = (total - before) * 8 / max(now - then, 1e-3) * scale
            if key not in self._last_flows:
                # First seen now, so it started after the last dump: all its
                # bytes came since, a lower bound on its rate one dump early.
                # Capped at the NIC rate, in case it was only missed before.
                rate = min(rate, self.fabric.spec.rates.nic_gbps * 1e9)
            rec = batch.flows.add(
                src_address=key[0],
                dst_address=key[1],
                protocol=PROTOCOLS.get(key[2], 0),
                src_port=key[3],
                dst_port=key[4],
                bytes_total=total,
                rate_bps=rate,
            )
            if key in egress:
                rec.ingress_leaf, rec.ingress_egress_port = egress[key]
            if key in transit:
                rec.transit_switch, rec.transit_egress_port = transit[key]
            rec.observe_time.FromNanoseconds(int(now * 1e9))
        self._last_flows = seen
        self._last_flow_dump = now


def _put_newest(pending: queue.Queue, batch: tpb.TelemetryBatch) -> None:
    """Queues `batch`; when the queue is full (its replica is away), the
    oldest batch makes room: a replica that comes back gets fresh telemetry."""
    while True:
        try:
            pending.put_nowait(batch)
            return
        except queue.Full:
            with contextlib.suppress(queue.Empty):
                pending.get_nowait()


class TelemetryAgent:
    """Streams telemetry to the controller until stopped; reconnects with
    backoff. `target` may list every replica (HOST:PORT,HOST:PORT): each gets
    every batch, so whichever leads sees the fabric (controller/runtime/ha.py)."""

    def __init__(self, fabric: Fabric, target: str, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.collector = TelemetryCollector(fabric, FabricSampler(fabric))
        self.targets = split_targets(target)
        self.interval_s = interval_s
        self.stop_event = threading.Event()
        self.sent_batches = 0
        # One queue per target: a slow or absent replica does not hold back the others.
        self._queues: dict[str, queue.Queue[tpb.TelemetryBatch]] = {
            t: queue.Queue(maxsize=QUEUED_BATCHES) for t in self.targets
        }
        self._threads: list[threading.Thread] = []

    def _collect(self) -> None:
        next_tick = time.monotonic()
        while not self.stop_event.is_set():
            batch = self.collector.batch(time.time())
            if batch.hops or batch.flows:
                self.sent_batches += 1
                for pending in self._queues.values():
                    _put_newest(pending, batch)
            next_tick += self.interval_s
            self.stop_event.wait(max(0.0, next_tick - time.monotonic()))

    def _batches(self, target: str) -> Iterator[tpb.TelemetryBatch]:
        pending = self._queues[target]
        while not self.stop_event.is_set():
            try:
                yield pending.get(timeout=self.interval_s)
            except queue.Empty:
                continue

    def _stream(self, target: str) -> None:
        backoff = 0.5
        while not self.stop_event.is_set():
            try:
                with Client(target, timeout_s=None) as client:
                    client.telemetry.ReportTelemetry(self._batches(target))
                backoff = 0.5
            except grpc.RpcError as exc:
                log.warning(
                    "telemetry stream to %s ended: %s %s; retrying in %.1f s",
                    target,
                    exc.code().name,
                    exc.details(),
                    backoff,
                )
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def start(self) -> TelemetryAgent:
        self._threads = [threading.Thread(target=self._collect, name="telemetry-agent", daemon=True)]
        self._threads += [
            threading.Thread(target=self._stream, args=(t,), name=f"telemetry-to-{t}", daemon=True)
            for t in self.targets
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self._threads:
            thread.join(timeout=5)
