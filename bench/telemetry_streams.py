"""Telemetry load for the benchmarks: streams of pre-encoded records with
churn, sent from a child process.

Kept apart from the benchmarks that time placements (soak.py, budget.py):
the sender's CPU must not be theirs, and its protobuf encoding is done once
per record, not per batch.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path

import grpc

from bench.child import Child
from controller.api.gen.railyard.v1 import common_pb2
from controller.api.gen.railyard.v1 import telemetry_pb2 as tpb
from controller.fabric import Fabric, NicId, load_fabric
from controller.fabric import addressing as ad

BATCHES_PER_S = 10  # per stream
REPORT = "/railyard.v1.TelemetryService/ReportTelemetry"


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field: batches are joined from pre-encoded records."""
    length, size = b"", len(payload)
    while True:
        byte = size & 0x7F
        size >>= 7
        length += bytes([byte | (0x80 if size else 0)])
        if not size:
            return bytes([number << 3 | 2]) + length + payload


class Flows:
    """One stream's flows: pre-encoded FlowRecords, some of them replaced every second."""

    def __init__(self, fabric: Fabric, count: int, rng: random.Random) -> None:
        self.fabric, self.rng = fabric, rng
        self.pods, self.servers = fabric.spec.pods, fabric.spec.servers_per_pod
        self.port = 1024 + rng.randrange(1000)
        self.records = [self._new() for _ in range(count)]
        self.uplinks = [e for leaf in fabric.switches if leaf.startswith("ryl") for e in fabric.uplinks(leaf)]

    def _new(self) -> bytes:
        rng, rail = self.rng, self.rng.randrange(self.fabric.rails)
        src = NicId(rail, rng.randrange(self.pods), rng.randrange(self.servers))
        dst = NicId(rail, rng.randrange(self.pods), rng.randrange(self.servers))
        while dst.pod == src.pod:
            dst = NicId(rail, rng.randrange(self.pods), rng.randrange(self.servers))
        via = rng.choice(self.fabric.vias(src, dst))
        leaf_hop = self.fabric.egress_path(src, dst, via)[1]
        self.port = self.port + 1 if self.port < 60000 else 1024
        record = tpb.FlowRecord(
            src_address=ad.nic_ip(src),
            dst_address=ad.nic_ip(dst),
            protocol=common_pb2.PROTOCOL_UDP,  # RoCEv2
            src_port=self.port,
            dst_port=4791,
            rate_bps=120e9 if rng.random() < 0.05 else rng.uniform(0.5e9, 2e9),
            bytes_total=rng.randrange(1 << 40),
            ingress_leaf=leaf_hop.node,
            ingress_egress_port=leaf_hop.port,
        )
        return _field(3, record.SerializeToString())

    def churn(self, share: float) -> None:
        for _ in range(round(share * len(self.records))):
            self.records[self.rng.randrange(len(self.records))] = self._new()

    def hops(self, count: int) -> bytes:
        chosen = self.rng.sample(self.uplinks, count)
        return b"".join(
            _field(
                1,
                tpb.HopRecord(
                    switch=e.node, egress_port=e.port, tx_bps=self.rng.uniform(1e9, 3e11)
                ).SerializeToString(),
            )
            for e in chosen
        )


class Stream(threading.Thread):
    """Sends `rate` records a second as 10 batches, through one stream after
    another: a stream the daemon ends is opened again after its pushback
    (at once, if not `polite`)."""

    def __init__(
        self, target: str, flows: Flows, rate: float, churn: float, stop: threading.Event, polite: bool = True
    ) -> None:
        super().__init__(daemon=True)
        self.target, self.flows, self.rate, self.churn, self.stop = target, flows, rate, churn, stop
        self.polite = polite
        self.sent = 0
        self.cut: Counter[str] = Counter()
        self.accepted = 0

    def run(self) -> None:
        with grpc.insecure_channel(self.target) as channel:
            report: grpc.StreamUnaryMultiCallable = channel.stream_unary(
                REPORT, None, tpb.ReportTelemetryResponse.FromString
            )
            while not self.stop.is_set():
                try:
                    self.accepted += report(self._batches(), timeout=3600).accepted_records
                except grpc.RpcError as exc:
                    self.cut[exc.code().name] += 1
                    trailers: dict = dict(exc.trailing_metadata() or ()) if isinstance(exc, grpc.Call) else {}
                    if self.polite:
                        self.stop.wait(int(trailers.get("grpc-retry-pushback-ms", "1000")) / 1000)

    def _batches(self):
        per_batch = max(1, round(self.rate / BATCHES_PER_S))
        hops = max(1, per_batch // 10)
        flows = per_batch - hops
        cursor, next_at, churned_at = 0, time.monotonic(), time.monotonic()
        while not self.stop.is_set():
            now = time.monotonic()
            if now - churned_at >= 1.0:
                self.flows.churn(self.churn)
                churned_at = now
            records = self.flows.records
            chosen = [records[(cursor + i) % len(records)] for i in range(flows)]
            cursor = (cursor + flows) % len(records)
            yield b"".join(chosen) + self.flows.hops(hops)
            self.sent += per_batch
            next_at += 1 / BATCHES_PER_S
            self.stop.wait(max(0.0, next_at - time.monotonic()))


def _send(
    spec: str, target: str, rates: list[float], flows: int, churn: float, seed: int, polite: bool, stop, out
) -> None:
    """In a process of its own: the streams, until `stop`; then their tallies on `out`."""
    fabric = load_fabric(spec)
    rng = random.Random(seed)
    done = threading.Event()
    streams = [Stream(target, Flows(fabric, flows, rng), rate, churn, done, polite) for rate in rates]
    for stream in streams:
        stream.start()
    stop.wait()
    done.set()
    for stream in streams:
        stream.join(timeout=10)
    out.put({"sent": sum(s.sent for s in streams), "cut": dict(sum((s.cut for s in streams), Counter()))})


class Sender:
    """Telemetry streams from a child process: generating 20,000 records a
    second takes CPU, and in the bench's own process it would slow the
    placement calls being timed (they share its interpreter lock)."""

    def __init__(self, spec: Path, target: str, rates: list[float], flows: int, churn: float, seed: int,
                 polite: bool = True) -> None:  # fmt: skip
        self._child = Child(_send, str(spec), target, rates, flows, churn, seed, polite)
        self.tally: dict = {"sent": 0, "cut": {}}

    def start(self) -> Sender:
        self._child.start()
        return self

    def stop(self) -> dict:
        self.tally = self._child.stop()
        return self.tally
