"""TelemetryService: agents stream hop records, path signals and flow records."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from controller.api.audit import AuditLog
from controller.api.auth import caller_of
from controller.api.errors import rpc, status_of
from controller.api.fabric import PROTOCOL_NAMES
from controller.api.gen.railyard.v1 import telemetry_pb2 as pb
from controller.api.gen.railyard.v1 import telemetry_pb2_grpc as pb_grpc
from controller.api.limits import TELEMETRY_RECORDS_PER_S, TELEMETRY_STREAMS_PER_CALLER, TelemetryBudget
from controller.api.refusals import Sampler, peer_address
from controller.errors import PermissionDenied, RateLimited
from controller.fabric import Endpoint, Fabric, NicId
from controller.fabric import addressing as ad
from controller.te.view import FlowSample, PathSample, PortSample
from controller.telemetry.ingest import Batch, TelemetryIngest

MAX_RECORDS_PER_BATCH = 10_000


def _seconds(ts) -> float:
    return ts.seconds + ts.nanos / 1e9


def _finite_nonnegative(value: float) -> bool:
    return value == value and 0 <= value < float("inf")


# How far ahead of ours an agent's clock may run. A sample dated later is
# dated this far ahead of its arrival: a clock in the future (or a forged
# date) must neither hide the honest samples that follow, which only win by
# being newer, nor outlive the forget horizon, which counts from its date.
MAX_CLOCK_SKEW_S = 1.0


@dataclass(frozen=True)
class Converted:
    batch: Batch
    rejected: int  # records naming a switch, port or NIC the fabric does not have, or bad values
    clamped: int  # records dated more than MAX_CLOCK_SKEW_S after they arrived


def nics_by_address(fabric: Fabric) -> dict[str, NicId]:
    """Every NIC of the fabric by its address as records name it: a flow
    record's two addresses are looked up, not parsed (parsing them was most
    of what 20,000 records a second cost)."""
    return {ad.nic_ip(nic): nic for nic in fabric.nics}


def convert(fabric: Fabric, msg: pb.TelemetryBatch, now: float, nics: Mapping[str, NicId] | None = None) -> Converted:
    """The valid records as a Batch. A record naming a switch, port or NIC the
    fabric does not have is rejected, not guessed."""
    nics = nics if nics is not None else nics_by_address(fabric)
    rejected = clamped = 0
    latest = now + MAX_CLOCK_SKEW_S

    def observed(sample) -> float:
        nonlocal clamped
        if not sample.HasField("observe_time"):
            return now
        at = _seconds(sample.observe_time)
        if at > latest:
            clamped += 1
            return latest
        return at

    ports, paths, flows = [], [], []
    for hop in msg.hops:
        sw = fabric.switches.get(hop.switch)
        if sw is None or hop.egress_port not in fabric.ports(hop.switch) or not _finite_nonnegative(hop.tx_bps):
            rejected += 1
            continue
        ports.append(
            (
                Endpoint(hop.switch, hop.egress_port),
                PortSample(hop.tx_bps, hop.queue_bytes, hop.drops_total, observed(hop), not hop.link_down),
            )
        )
    for sig in msg.paths:
        names = (sig.src_leaf, sig.spine, sig.dst_leaf, sig.bottleneck_switch)
        if not all(n in fabric.switches for n in names) or not _finite_nonnegative(sig.min_available_bps):
            rejected += 1
            continue
        paths.append(
            (
                (sig.src_leaf, sig.spine, sig.dst_leaf),
                PathSample(
                    sig.min_available_bps,
                    sig.max_queue_bytes,
                    Endpoint(sig.bottleneck_switch, sig.bottleneck_port),
                    observed(sig),
                ),
            )
        )
    for rec in msg.flows:
        if rec.src_address not in nics or rec.dst_address not in nics:
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
        key = (rec.src_address, rec.dst_address, PROTOCOL_NAMES[rec.protocol], rec.src_port, rec.dst_port)
        ingress = _named_egress(fabric, rec.ingress_leaf, rec.ingress_egress_port)
        transit = _named_egress(fabric, rec.transit_switch, rec.transit_egress_port)
        if ingress is _UNKNOWN or transit is _UNKNOWN:
            rejected += 1
            continue
        flows.append((key, FlowSample(rec.rate_bps, rec.bytes_total, observed(rec), ingress, transit)))
    return Converted(Batch(tuple(ports), tuple(paths), tuple(flows)), rejected, clamped)


_UNKNOWN = Endpoint("", -1)  # a port the record names and the fabric has not


def _named_egress(fabric: Fabric, switch: str, port: int) -> Endpoint | None:
    """The egress port a flow record names ("" names none: None), or _UNKNOWN."""
    if not switch:
        return None
    if switch not in fabric.switches or port not in fabric.ports(switch):
        return _UNKNOWN
    return Endpoint(switch, port)


def reported_switches(batch: pb.TelemetryBatch) -> set[str]:
    """Every switch a batch reports for: hops' switches, paths' ends and
    bottlenecks, flows' ingress leaves and transit switches."""
    names = {h.switch for h in batch.hops} | {f.ingress_leaf for f in batch.flows}
    names |= {f.transit_switch for f in batch.flows}
    for path in batch.paths:
        names |= {path.src_leaf, path.dst_leaf, path.bottleneck_switch}
    names.discard("")
    return names


MAX_STREAMS = 32  # open at once, every caller together: each holds a server thread of its own (server.py)


class TelemetryServicer(pb_grpc.TelemetryServiceServicer):
    def __init__(
        self,
        fabric: Fabric,
        ingest: TelemetryIngest,
        metrics,
        records_per_s: float = TELEMETRY_RECORDS_PER_S,
        streams_per_caller: int = TELEMETRY_STREAMS_PER_CALLER,
    ) -> None:
        self.fabric = fabric
        self.ingest = ingest
        self.metrics = metrics
        self.budget = TelemetryBudget(records_per_s, streams_per_caller)
        self.nics = nics_by_address(fabric)
        self.audit: AuditLog | None = None
        self._streams = threading.BoundedSemaphore(MAX_STREAMS)
        self._refusals = Sampler()

    @rpc
    def ReportTelemetry(self, request_iterator, context):
        caller = caller_of(context)
        who = caller.identity if caller is not None else peer_address(context)
        tally = _Tally()
        try:
            if not self._streams.acquire(blocking=False):
                raise RateLimited(f"at most {MAX_STREAMS} telemetry streams at once; retry shortly", 1.0)
            try:
                stream = self.budget.open(who)  # RateLimited: over its streams
                try:
                    stream.hold()  # RateLimited, slowly: told to wait, and did not
                    return self._report(request_iterator, caller, stream, tally)
                finally:
                    stream.close()
            finally:
                self._streams.release()
        except Exception as exc:
            tally.code = status_of(exc).name
            raise
        finally:
            self._audit(context, caller, who, tally)

    def _report(self, request_iterator, caller, stream, tally: _Tally) -> pb.ReportTelemetryResponse:
        tally.opened = True
        for msg in request_iterator:
            if caller is not None and caller.grant.switches is not None:
                allowed = caller.grant.switches
                foreign = sorted(reported_switches(msg) - allowed)
                if foreign:  # nothing of this batch is applied
                    raise PermissionDenied(
                        f"agent {caller.identity!r} may not report for switch {foreign[0][:64]!r} "
                        f"(it is named for {', '.join(sorted(allowed))})"
                    )
            size = len(msg.hops) + len(msg.paths) + len(msg.flows)
            stream.take(size)  # RateLimited ends the stream: RESOURCE_EXHAUSTED, with when to retry
            if size > MAX_RECORDS_PER_BATCH:
                tally.rejected += size
                self.metrics.telemetry_records.labels("rejected").inc(size)
                continue
            self.ingest.priority.yield_to_api()  # the API first: placement waits for no batch
            converted = convert(self.fabric, msg, self.ingest.clock(), self.nics)
            batch = converted.batch
            tally.rejected += converted.rejected
            self.metrics.telemetry_records.labels("rejected").inc(converted.rejected)
            if converted.clamped:
                # Counted apart from accepted: an agent whose clock runs ahead shows here.
                self.metrics.telemetry_records.labels("clamped").inc(converted.clamped)
            if batch:
                self.ingest.submit(batch)  # raises Overloaded -> RESOURCE_EXHAUSTED
                tally.accepted += len(batch)
        return pb.ReportTelemetryResponse(accepted_records=tally.accepted, rejected_records=tally.rejected)

    def _audit(self, context, caller, who: str, tally: _Tally) -> None:
        """One line per stream: who, how it ended, the records it delivered.
        A stream refused before it opened is sampled like any refusal."""
        if self.audit is None:
            return
        code = tally.code or ("OK" if context.is_active() else "CANCELLED")
        held_back = 0
        if not tally.opened:
            verdict = self._refusals(who)
            if not verdict.write:
                return
            held_back = verdict.held_back
        self.audit.record(
            identity=caller.identity if caller else None,
            role=caller.grant.role if caller else None,
            method="ReportTelemetry",
            code=code,
            peer=peer_address(context),
            held_back=held_back,
            records=tally.accepted + tally.rejected,
        )


class _Tally:
    def __init__(self) -> None:
        self.accepted = self.rejected = 0
        self.opened = False
        self.code = ""
