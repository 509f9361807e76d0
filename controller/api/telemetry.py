"""TelemetryService: agents stream hop records, path signals and flow records."""

from __future__ import annotations

from controller.api.errors import rpc
from controller.api.fabric import PROTOCOL_NAMES
from controller.api.gen.railyard.v1 import telemetry_pb2 as pb
from controller.api.gen.railyard.v1 import telemetry_pb2_grpc as pb_grpc
from controller.fabric import Endpoint, Fabric
from controller.fabric import addressing as ad
from controller.te.view import FlowSample, PathSample, PortSample
from controller.telemetry.ingest import Batch, TelemetryIngest

MAX_RECORDS_PER_BATCH = 10_000


def _seconds(ts) -> float:
    return ts.seconds + ts.nanos / 1e9


def _finite_nonnegative(value: float) -> bool:
    return value == value and 0 <= value < float("inf")


def convert(fabric: Fabric, msg: pb.TelemetryBatch, now: float) -> tuple[Batch, int]:
    """(valid records as a Batch, how many were rejected). A record naming a
    switch, port or address the fabric does not have is rejected, not guessed."""
    rejected = 0
    ports, paths, flows = [], [], []
    for hop in msg.hops:
        sw = fabric.switches.get(hop.switch)
        if sw is None or hop.egress_port not in fabric.ports(hop.switch) or not _finite_nonnegative(hop.tx_bps):
            rejected += 1
            continue
        observed = _seconds(hop.observe_time) if hop.HasField("observe_time") else now
        ports.append(
            (
                Endpoint(hop.switch, hop.egress_port),
                PortSample(hop.tx_bps, hop.queue_bytes, hop.drops_total, observed, not hop.link_down),
            )
        )
    for sig in msg.paths:
        names = (sig.src_leaf, sig.spine, sig.dst_leaf, sig.bottleneck_switch)
        if not all(n in fabric.switches for n in names) or not _finite_nonnegative(sig.min_available_bps):
            rejected += 1
            continue
        observed = _seconds(sig.observe_time) if sig.HasField("observe_time") else now
        paths.append(
            (
                (sig.src_leaf, sig.spine, sig.dst_leaf),
                PathSample(
                    sig.min_available_bps,
                    sig.max_queue_bytes,
                    Endpoint(sig.bottleneck_switch, sig.bottleneck_port),
                    observed,
                ),
            )
        )
    for rec in msg.flows:
        try:
            ad.parse_nic_address(rec.src_address)
            ad.parse_nic_address(rec.dst_address)
        except ad.AddressError:
            rejected += 1
            continue
        if (
            rec.protocol not in PROTOCOL_NAMES
            or not _finite_nonnegative(rec.rate_bps)
            or rec.src_port > 65535
            or rec.dst_port > 65535
        ):
            rejected += 1
            continue
        observed = _seconds(rec.observe_time) if rec.HasField("observe_time") else now
        key = (rec.src_address, rec.dst_address, PROTOCOL_NAMES[rec.protocol], rec.src_port, rec.dst_port)
        ingress = None
        if rec.ingress_leaf:
            if rec.ingress_leaf not in fabric.switches or rec.ingress_egress_port not in fabric.ports(rec.ingress_leaf):
                rejected += 1
                continue
            ingress = Endpoint(rec.ingress_leaf, rec.ingress_egress_port)
        flows.append((key, FlowSample(rec.rate_bps, rec.bytes_total, observed, ingress)))
    return Batch(tuple(ports), tuple(paths), tuple(flows)), rejected


class TelemetryServicer(pb_grpc.TelemetryServiceServicer):
    def __init__(self, fabric: Fabric, ingest: TelemetryIngest, metrics) -> None:
        self.fabric = fabric
        self.ingest = ingest
        self.metrics = metrics

    @rpc
    def ReportTelemetry(self, request_iterator, context):
        accepted = rejected = 0
        for msg in request_iterator:
            size = len(msg.hops) + len(msg.paths) + len(msg.flows)
            if size > MAX_RECORDS_PER_BATCH:
                rejected += size
                self.metrics.telemetry_records.labels("rejected").inc(size)
                continue
            batch, bad = convert(self.fabric, msg, self.ingest.clock())
            rejected += bad
            self.metrics.telemetry_records.labels("rejected").inc(bad)
            if batch:
                self.ingest.submit(batch)  # raises Overloaded -> RESOURCE_EXHAUSTED
                accepted += len(batch)
        return pb.ReportTelemetryResponse(accepted_records=accepted, rejected_records=rejected)
