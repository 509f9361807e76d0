"""Python client for the Railyard gRPC API (used by the CLI, tests and the telemetry agent)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from controller.api.gen.railyard.v1 import common_pb2
from controller.api.gen.railyard.v1 import fabric_pb2 as fpb
from controller.api.gen.railyard.v1 import fabric_pb2_grpc as fpb_grpc
from controller.api.gen.railyard.v1 import placement_pb2 as ppb
from controller.api.gen.railyard.v1 import placement_pb2_grpc as ppb_grpc
from controller.api.gen.railyard.v1 import te_pb2 as tepb
from controller.api.gen.railyard.v1 import te_pb2_grpc as tepb_grpc
from controller.api.gen.railyard.v1 import telemetry_pb2 as tpb
from controller.api.gen.railyard.v1 import telemetry_pb2_grpc as tpb_grpc
from controller.intent.drains import DrainTarget
from controller.security.tokens import read_token

DEFAULT_TARGET = "127.0.0.1:50051"
DEFAULT_TIMEOUT_S = 10.0
PATTERNS = {
    "ring": ppb.COLLECTIVE_PATTERN_RING,
    "tree": ppb.COLLECTIVE_PATTERN_TREE,
    "all-to-all": ppb.COLLECTIVE_PATTERN_ALL_TO_ALL,
}
VIEWS = {"summary": ppb.JOB_VIEW_SUMMARY, "full": ppb.JOB_VIEW_FULL}


def _replies(call, request) -> Iterator:
    """Every page's reply of a paged list call, in order."""
    while True:
        reply = call(request)
        yield reply
        if not reply.next_page_token:
            return
        request.page_token = reply.next_page_token


def _pages(call, request, field: str) -> list:
    return [item for reply in _replies(call, request) for item in getattr(reply, field)]


@dataclass(frozen=True)
class ClientTls:
    """The CA the controller's certificate must chain to, and this client's
    identity, which the controller maps to a role: a certificate and key, or
    a bearer token (for the controller's token listener)."""

    ca: bytes
    cert: bytes | None = None
    key: bytes | None = None
    token: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None) or (self.cert is None) == (self.token is None):
            raise ValueError("a client identity is a certificate and its key, or a bearer token")

    @classmethod
    def from_files(cls, ca: str | Path, cert: str | Path, key: str | Path) -> ClientTls:
        return cls(Path(ca).read_bytes(), Path(cert).read_bytes(), Path(key).read_bytes())

    @classmethod
    def with_token(cls, ca: str | Path, token_file: str | Path) -> ClientTls:
        return cls(Path(ca).read_bytes(), token=read_token(token_file))

    def credentials(self) -> grpc.ChannelCredentials:
        channel = grpc.ssl_channel_credentials(self.ca, self.key, self.cert)
        if self.token is None:
            return channel
        return grpc.composite_channel_credentials(channel, grpc.access_token_call_credentials(self.token))


LEADER_METADATA_KEY = "railyard-leader"  # a follower's refusal names the leader in this trailer ("": none yet)
ELECTION_WAIT_S = 5.0  # how long a call refused for want of a leader keeps asking
ELECTION_POLL_S = 0.2


def split_targets(target: str) -> list[str]:
    """HOST:PORT,HOST:PORT: every replica of the controller."""
    return [t.strip() for t in target.split(",") if t.strip()] or [target]


class _Following:
    """A service's stub that follows the leader: a call a follower refuses
    (FAILED_PRECONDITION with the leader's address: it changed nothing) is
    sent again to the leader. One that got no answer (UNAVAILABLE) goes to
    the next target only if sending it twice is harmless: a read, or a
    placement with a request_id (a retry of it returns the first). If the
    followers then refuse until the call gives up, the caller gets the
    unanswered attempt's error: its outcome is unknown, not refused."""

    def __init__(self, client: Client, stub: str) -> None:
        self._client = client
        self._stub = stub

    def __getattr__(self, method: str):
        def call(request, *args, **kwargs):
            repeatable = method.startswith(("Get", "List", "Score")) or bool(getattr(request, "request_id", ""))
            # An election takes up to a lease TTL and a bit: wait that out, no longer.
            deadline = time.monotonic() + ELECTION_WAIT_S
            hops = 0  # a bound besides the deadline: never an endless loop
            unanswered: grpc.RpcError | None = None  # the first attempt that may have landed
            while True:
                try:
                    return getattr(getattr(self._client, self._stub), method)(request, *args, **kwargs)
                except grpc.RpcError as exc:
                    if unanswered is None and _code(exc) in UNKNOWN_OUTCOME:
                        unanswered = exc
                    hops += 1
                    if hops > 200 or time.monotonic() > deadline or not self._client._follow(exc, repeatable):
                        # A follower's refusal of a later attempt says nothing of
                        # whether the unanswered one landed: the caller must hear
                        # that the outcome is unknown, not that it was refused.
                        if unanswered is not None and _leader_named(exc) is not None:
                            raise unanswered from None
                        raise

        return call


UNKNOWN_OUTCOME = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def _code(exc: grpc.RpcError) -> grpc.StatusCode | None:
    return exc.code() if isinstance(exc, grpc.Call) else None


def _leader_named(exc: grpc.RpcError) -> str | None:
    """Where a replica that does not lead says the leader is ("": nowhere
    yet); None if `exc` is not such a refusal."""
    if not isinstance(exc, grpc.Call) or exc.code() is not grpc.StatusCode.FAILED_PRECONDITION:
        return None
    trailers: dict = dict(exc.trailing_metadata() or ())
    leader = trailers.get(LEADER_METADATA_KEY)
    return leader if isinstance(leader, str) else None


class Client:
    """The API's client. `target` may list every replica (HOST:PORT,HOST:PORT):
    mutations find the leader, reads are answered by whichever replica."""

    def __init__(
        self, target: str = DEFAULT_TARGET, timeout_s: float | None = DEFAULT_TIMEOUT_S, tls: ClientTls | None = None
    ) -> None:
        self.targets = split_targets(target)
        self.tls = tls
        self.timeout = timeout_s
        self.fabric = cast(fpb_grpc.FabricServiceStub, _Following(self, "_fabric"))
        self.placement = cast(ppb_grpc.PlacementServiceStub, _Following(self, "_placement"))
        self._connect(self.targets[0])

    def _connect(self, target: str) -> None:
        self.target = target
        if self.tls is None:
            self.channel = grpc.insecure_channel(target)
        else:
            self.channel = grpc.secure_channel(target, self.tls.credentials())
        self._fabric = fpb_grpc.FabricServiceStub(self.channel)
        self._placement = ppb_grpc.PlacementServiceStub(self.channel)
        self.telemetry = tpb_grpc.TelemetryServiceStub(self.channel)
        self.te = tepb_grpc.TeServiceStub(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)

    def _follow(self, exc: grpc.RpcError, repeatable: bool) -> bool:
        """Moves to where `exc` says to try again; False if it says nothing of
        the sort, or the call may have done its work already (not `repeatable`)."""
        code, leader = _code(exc), _leader_named(exc)
        if code is grpc.StatusCode.FAILED_PRECONDITION:
            if leader == "":  # refused (nothing changed) while no replica leads: ask again shortly
                time.sleep(ELECTION_POLL_S)
                return True
            if leader is None or leader == self.target:
                return False
            target = leader
        elif code is grpc.StatusCode.UNAVAILABLE and repeatable and len(self.targets) > 1:
            following = self.targets.index(self.target) + 1 if self.target in self.targets else 0
            target = self.targets[following % len(self.targets)]
            # A replica just died: the others may still name it as leader until
            # its lease runs out. Pause, so the round trips do not spin.
            time.sleep(ELECTION_POLL_S / 2)
        else:
            return False
        self.channel.close()
        self._connect(target)
        return True

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def health(self, service: str = "") -> str:
        """gRPC health's status of `service` ("SERVING", "NOT_SERVING", ...);
        a call that fails (no connection, an unknown name) raises."""
        reply = self._health.Check(health_pb2.HealthCheckRequest(service=service), timeout=self.timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)

    def serving(self, service: str = "") -> bool:
        """Whether gRPC health reports `service` SERVING: "" the API,
        railyard.fabric every switch reconciled, railyard.leader this replica leads."""
        try:
            reply = self._health.Check(health_pb2.HealthCheckRequest(service=service), timeout=self.timeout)
        except grpc.RpcError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    # --- placement ----------------------------------------------------------
    def place_job(
        self,
        job_id: str,
        gpu_count: int,
        pattern: str = "ring",
        flow_gbps: float = 0.0,
        gpus_per_server: int = 0,
        servers: Iterable[str] = (),
        max_pods: int = 0,
        exclusive: bool = False,
        request_id: str = "",
        view: str = "summary",
        max_predicted_utilization: float = 0.0,
        validate_only: bool = False,
        qps_per_connection: int = 1,
    ) -> ppb.PlaceJobResponse:
        """`view`: "summary" (no flows: page them with job_flows) or "full".
        `validate_only`: the placement it would make; nothing placed."""
        request = ppb.PlaceJobRequest(
            job_id=job_id,
            gpu_count=gpu_count,
            gpus_per_server=gpus_per_server,
            servers=list(servers),
            pattern=PATTERNS[pattern],
            flow_bandwidth_gbps=flow_gbps,
            max_pods=max_pods,
            exclusive_servers=exclusive,
            request_id=request_id,
            view=VIEWS[view],
            max_predicted_utilization=max_predicted_utilization,
            validate_only=validate_only,
            qps_per_connection=qps_per_connection,
        )
        return self.placement.PlaceJob(request, timeout=self.timeout)

    def score_placements(
        self, job: ppb.PlaceJobRequest, candidates: Iterable[Iterable[str]]
    ) -> ppb.ScorePlacementsResponse:
        """A score per candidate server set (node names or Railyard's), nothing placed."""
        request = ppb.ScorePlacementsRequest(
            job=job, candidates=[ppb.CandidatePlacement(servers=list(c)) for c in candidates]
        )
        return self.placement.ScorePlacements(request, timeout=self.timeout)

    def release_job(self, job_id: str) -> ppb.Job:
        return self.placement.ReleaseJob(ppb.ReleaseJobRequest(job_id=job_id), timeout=self.timeout).job

    def get_job(self, job_id: str, view: str = "summary") -> ppb.Job:
        return self.placement.GetJob(ppb.GetJobRequest(job_id=job_id, view=VIEWS[view]), timeout=self.timeout).job

    def job_flows(self, job_id: str) -> list[ppb.JobFlow]:
        """A job's flows, page by page: a large job's do not fit one reply."""
        request = ppb.ListJobFlowsRequest(job_id=job_id, page_size=10_000)
        return _pages(lambda r: self.placement.ListJobFlows(r, timeout=self.timeout), request, "flows")

    def list_jobs(self) -> list[ppb.Job]:
        return self.list_jobs_at()[0]

    def list_jobs_at(self) -> tuple[list[ppb.Job], int]:
        """Every job and the revision to watch from (the first page's): an informer's list."""
        replies = list(_replies(lambda r: self.placement.ListJobs(r, timeout=self.timeout), ppb.ListJobsRequest()))
        return [job for reply in replies for job in reply.jobs], replies[0].intent_revision

    def watch_decisions(self, include_recent: bool = False, timeout_s: float | None = None):
        """TE's decisions as they are made (advisory: its recommendations): a stream of
        WatchDecisionsResponse, each with one `decision`; `.cancel()` ends it."""
        return self.te.WatchDecisions(tepb.WatchDecisionsRequest(include_recent=include_recent), timeout=timeout_s)

    def watch_jobs(
        self, timeout_s: float | None = None, since_revision: int | None = None, include_programmed: bool = False
    ) -> Iterator[ppb.JobEvent]:
        """Changes from now on; with `since_revision`, every change after it
        (from a list's revision); with `include_programmed`, PROGRAMMED too."""
        request = ppb.WatchJobsRequest(since_revision=since_revision, include_programmed=include_programmed)
        return self.placement.WatchJobs(request, timeout=timeout_s)

    def wait_programmed(self, job_id: str, timeout_s: float) -> int:
        """The revision the fabric programmed the job at, once every switch it
        uses holds its entries; 0 if that takes over `timeout_s`."""
        revision = self.placement.ListJobs(ppb.ListJobsRequest(page_size=1), timeout=self.timeout).intent_revision
        stream = self.watch_jobs(timeout_s, since_revision=revision, include_programmed=True)
        try:
            job = self.get_job(job_id)
            if job.programmed_revision:  # programmed before `revision`: no event to come
                return job.programmed_revision
            for event in stream:
                if event.kind == ppb.JobEvent.KIND_PROGRAMMED and event.job.job_id == job_id:
                    return event.intent_revision
        except grpc.RpcError as err:
            if err.code() is not grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
        finally:
            stream.cancel()  # type: ignore[attr-defined]
        return 0

    # --- fabric -------------------------------------------------------------
    def get_fabric(self) -> fpb.GetFabricResponse:
        return self.fabric.GetFabric(fpb.GetFabricRequest(), timeout=self.timeout)

    def free_capacity(
        self, pods: Iterable[int] = (), include_full_servers: bool = False
    ) -> fpb.GetFreeCapacityResponse:
        request = fpb.GetFreeCapacityRequest(pods=list(pods), include_full_servers=include_full_servers)
        return self.fabric.GetFreeCapacity(request, timeout=self.timeout)

    def list_links(self, switch: str = "", include_access: bool = False) -> list[fpb.Link]:
        request = fpb.ListLinksRequest(switch=switch, include_access=include_access)
        return _pages(lambda r: self.fabric.ListLinks(r, timeout=self.timeout), request, "links")

    def drain(self, target: DrainTarget, name: str, drained: bool = True):
        calls = {
            (DrainTarget.LINK, True): (self.fabric.DrainLink, fpb.DrainLinkRequest(link=name)),
            (DrainTarget.LINK, False): (self.fabric.UndrainLink, fpb.UndrainLinkRequest(link=name)),
            (DrainTarget.SWITCH, True): (self.fabric.DrainSwitch, fpb.DrainSwitchRequest(switch=name)),
            (DrainTarget.SWITCH, False): (self.fabric.UndrainSwitch, fpb.UndrainSwitchRequest(switch=name)),
        }
        call, request = calls[(target, drained)]
        return call(request, timeout=self.timeout)

    def pin_flow(
        self,
        name: str,
        src: str,
        dst: str,
        spine: str,
        protocol: str = "",
        src_port: int = 0,
        dst_port: int = 0,
        forward_only: bool = False,
    ) -> fpb.PinFlowResponse:
        # Protocol.Value() is typed as a plain int; the number it returns is a Protocol.
        protocol_number = cast(
            common_pb2.Protocol, common_pb2.Protocol.Value(f"PROTOCOL_{(protocol or 'unspecified').upper()}")
        )
        match = fpb.FlowMatch(
            src_address=src,
            dst_address=dst,
            src_port=src_port,
            dst_port=dst_port,
            protocol=protocol_number,
        )
        pin = fpb.FlowPin(name=name, match=match, spine=spine, forward_only=forward_only)
        return self.fabric.PinFlow(fpb.PinFlowRequest(pin=pin), timeout=self.timeout)

    def unpin_flow(self, name: str) -> fpb.UnpinFlowResponse:
        return self.fabric.UnpinFlow(fpb.UnpinFlowRequest(name=name), timeout=self.timeout)

    def list_pins(self) -> list[fpb.FlowPin]:
        return _pages(lambda r: self.fabric.ListPins(r, timeout=self.timeout), fpb.ListPinsRequest(), "pins")

    # --- telemetry ----------------------------------------------------------
    def report_telemetry(self, batches: Iterable[tpb.TelemetryBatch]) -> tpb.ReportTelemetryResponse:
        return self.telemetry.ReportTelemetry(iter(batches), timeout=self.timeout)
