"""Fuzzing the gRPC API of the running daemon: raw garbage, adversarial values,
oversize messages, in the clear and over mutual TLS. Only the documented codes
may come back, and afterwards the daemon is healthy with its state exactly as
before."""

import math
import threading
import time
from collections import Counter
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.api.gen.railyard.v1 import fabric_pb2 as fpb
from controller.api.gen.railyard.v1 import placement_pb2 as ppb
from controller.api.gen.railyard.v1 import telemetry_pb2 as tpb
from controller.security import certs
from emulation.processes.controller_process import total
from tests.integration.helpers import api_daemon, clear_intent, client_tls, mutual_tls_args

ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
PLACEMENT_METHODS = ("PlaceJob", "ReleaseJob", "GetJob", "ListJobs", "ScorePlacements")
UNARY = [f"/railyard.v1.PlacementService/{m}" for m in PLACEMENT_METHODS] + [
    f"/railyard.v1.FabricService/{m}"
    for m in (
        "GetFabric",
        "GetFreeCapacity",
        "ListLinks",
        "DrainLink",
        "UndrainLink",
        "DrainSwitch",
        "UndrainSwitch",
        "PinFlow",
        "UnpinFlow",
        "ListPins",
    )
]


def state_of(client):
    fabric = client.get_fabric()
    return (
        tuple(client.list_jobs()),
        tuple(client.list_pins()),
        fabric.free_gpu_count,
        tuple((s.name, s.drained) for s in fabric.switches),
        tuple((link.name, link.drained) for link in client.list_links(include_access=True)),
    )


def call_raw(channel, method, payload: bytes):
    stub = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
    try:
        stub(payload, timeout=10)
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()


@pytest.fixture(scope="module")
def baseline(fabric_and_controller):
    _, ctl = fabric_and_controller
    with ctl.client() as client:
        return state_of(client)


def test_raw_bytes_get_documented_codes(ctl, baseline):
    seen: Counter[grpc.StatusCode] = Counter()
    with ctl.client() as client:
        channel = client.channel

        @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
        @given(method=st.sampled_from(UNARY), payload=st.binary(max_size=512))
        def fuzz(method, payload):
            code = call_raw(channel, method, payload)
            seen[code] += 1
            assert code in ALLOWED, (method, payload, code)
            if code == grpc.StatusCode.OK:
                clear_intent(client)  # a random message that happened to be a valid mutation

        fuzz()
        assert sum(seen.values()) >= 200 and seen[grpc.StatusCode.INVALID_ARGUMENT] > 0
        assert call_raw(channel, UNARY[0], b"\xff\xff\xff\xff") == grpc.StatusCode.INVALID_ARGUMENT
        assert state_of(client) == baseline


# Any: the values are deliberately out of range or of the wrong kind.
ADVERSARIAL_JOBS: list[dict[str, Any]] = [
    dict(job_id="j", gpu_count=2**32 - 1, pattern=1),
    dict(job_id="j", gpu_count=2, pattern=1, flow_bandwidth_gbps=-1.0),
    dict(job_id="j", gpu_count=2, pattern=1, flow_bandwidth_gbps=math.nan),
    dict(job_id="j", gpu_count=2, pattern=1, flow_bandwidth_gbps=math.inf),
    dict(job_id="j", gpu_count=2, pattern=99),
    dict(job_id="j", gpu_count=2, pattern=0),
    dict(job_id="j", gpu_count=4, pattern=1, servers=["ryh0s0", "ghost"]),
    dict(job_id="j", gpu_count=4, pattern=1, servers=["ryh0s0", "ryh0s0"]),
    dict(job_id="j" * 100_000, gpu_count=2, pattern=1),
    dict(job_id="", gpu_count=2, pattern=1),
    dict(job_id="j", gpu_count=2, pattern=1, gpus_per_server=2**31),
    dict(job_id="j", gpu_count=2, pattern=1, max_pods=2**32 - 1),
    dict(job_id="j", gpu_count=2, pattern=1, request_id="r" * 10_000),
    dict(job_id="j", gpu_count=9, pattern=3),
]


def test_adversarial_values_get_specific_errors(ctl, baseline):
    with ctl.client() as client:
        for fields in ADVERSARIAL_JOBS:
            with pytest.raises(grpc.RpcError) as err:
                client.placement.PlaceJob(ppb.PlaceJobRequest(**fields), timeout=10)
            assert err.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED), fields
            if err.value.code() == grpc.StatusCode.INVALID_ARGUMENT:
                # grpc-stubs type RpcError.details() as str | None; the daemon always sets details on these errors.
                assert "allowed" in err.value.details(), (fields, err.value.details())  # type: ignore[operator]
        calls = [
            (client.placement.ListJobs, ppb.ListJobsRequest(page_size=-5), grpc.StatusCode.INVALID_ARGUMENT),
            (
                client.placement.ListJobs,
                ppb.ListJobsRequest(page_token="!!not-a-token"),
                grpc.StatusCode.INVALID_ARGUMENT,
            ),
            (client.placement.GetJob, ppb.GetJobRequest(job_id="ghost"), grpc.StatusCode.NOT_FOUND),
            (client.placement.ReleaseJob, ppb.ReleaseJobRequest(job_id="ghost"), grpc.StatusCode.NOT_FOUND),
            (client.fabric.ListLinks, fpb.ListLinksRequest(switch="ghost"), grpc.StatusCode.INVALID_ARGUMENT),
            (client.fabric.DrainLink, fpb.DrainLinkRequest(link="ryl0r0"), grpc.StatusCode.INVALID_ARGUMENT),
            (client.fabric.DrainLink, fpb.DrainLinkRequest(link="ryl0r0:999"), grpc.StatusCode.NOT_FOUND),
            (client.fabric.DrainSwitch, fpb.DrainSwitchRequest(switch="ghost"), grpc.StatusCode.NOT_FOUND),
            (client.fabric.PinFlow, fpb.PinFlowRequest(), grpc.StatusCode.INVALID_ARGUMENT),
            (
                client.fabric.PinFlow,
                fpb.PinFlowRequest(
                    pin=fpb.FlowPin(
                        name="p",
                        spine="rys0",
                        # 42 is deliberately no Protocol value: the stubs accept only enum members.
                        match=fpb.FlowMatch(src_address="10.0.0.1", dst_address="10.0.1.1", protocol=42),  # type: ignore[arg-type]
                    )
                ),
                grpc.StatusCode.INVALID_ARGUMENT,
            ),
            (client.fabric.UnpinFlow, fpb.UnpinFlowRequest(name="ghost"), grpc.StatusCode.NOT_FOUND),
            (
                client.placement.ScorePlacements,
                ppb.ScorePlacementsRequest(
                    job=ppb.PlaceJobRequest(job_id="s", gpu_count=2, pattern=ppb.COLLECTIVE_PATTERN_RING)
                ),
                grpc.StatusCode.INVALID_ARGUMENT,  # no candidates
            ),
            (
                client.placement.ScorePlacements,
                ppb.ScorePlacementsRequest(
                    job=ppb.PlaceJobRequest(job_id="s", gpu_count=2, pattern=ppb.COLLECTIVE_PATTERN_RING),
                    candidates=[ppb.CandidatePlacement(servers=["ryh0s0"])] * 65,
                ),
                grpc.StatusCode.INVALID_ARGUMENT,  # over 64
            ),
            (
                client.placement.ScorePlacements,
                ppb.ScorePlacementsRequest(
                    job=ppb.PlaceJobRequest(job_id="s", gpu_count=2, pattern=ppb.COLLECTIVE_PATTERN_RING),
                    candidates=[ppb.CandidatePlacement(servers=[])],
                ),
                grpc.StatusCode.INVALID_ARGUMENT,  # an empty candidate
            ),
        ]
        for call, request, code in calls:
            with pytest.raises(grpc.RpcError) as err:
                call(request, timeout=10)
            assert err.value.code() == code, (request, err.value.details())

        # Oversize: refused by the transport limit before any handler runs.
        with pytest.raises(grpc.RpcError) as err:
            client.placement.PlaceJob(ppb.PlaceJobRequest(job_id="x" * (5 * 1024 * 1024)), timeout=10)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

        # Telemetry: bad records are rejected and counted, a huge batch likewise; never applied.
        bad = tpb.TelemetryBatch()
        bad.hops.add(switch="ryl0r0", egress_port=3, tx_bps=math.nan)
        bad.hops.add(switch="ryl0r0", egress_port=999, tx_bps=1.0)
        bad.flows.add(src_address="banana", dst_address="10.0.1.1")
        bad.paths.add(src_leaf="ghost", spine="rys0", dst_leaf="ryl1r0", bottleneck_switch="rys0")
        huge = tpb.TelemetryBatch(hops=[tpb.HopRecord(switch="ryl0r0", egress_port=3)] * 10_001)
        summary = client.report_telemetry([bad, huge])
        assert summary.accepted_records == 0 and summary.rejected_records == 4 + 10_001

        # A validated placement is answered, and nothing is placed.
        dry = client.place_job("dry-run", 2, "ring", validate_only=True)
        assert dry.validated_only and not dry.created and len(dry.job.gpus) == 2
        assert client.serving()
        assert state_of(client) == baseline
    samples = ctl.metrics()
    assert total(samples, "railyard_api_requests_total", code="INTERNAL") == 0
    assert total(samples, "railyard_api_requests_total", code="UNKNOWN") == 0
    assert ctl.proc.poll() is None


def test_a_client_that_cancels_its_telemetry_stream_is_counted_cancelled_never_internal(ctl):
    before = ctl.metrics()
    stop = threading.Event()

    def batches():
        yield tpb.TelemetryBatch(hops=[tpb.HopRecord(switch="ryl0r0", egress_port=3, tx_bps=1e9)])
        stop.wait(10)  # the agent is still "streaming" when it cancels

    with grpc.insecure_channel(f"127.0.0.1:{ctl.ports.grpc}") as channel:
        call = channel.stream_unary(
            "/railyard.v1.TelemetryService/ReportTelemetry",
            request_serializer=tpb.TelemetryBatch.SerializeToString,
            response_deserializer=tpb.ReportTelemetryResponse.FromString,
        ).future(batches())
        # Cancel once the server is inside the stream (it has applied the first batch).
        deadline = time.monotonic() + 10
        accepted = total(before, "railyard_telemetry_records_total", result="accepted")
        while total(ctl.metrics(), "railyard_telemetry_records_total", result="accepted") <= accepted:
            assert time.monotonic() < deadline, "the first batch never arrived"
            time.sleep(0.05)
        call.cancel()
        stop.set()

    # Counted once the server's handler is done. CANCELLED, or OK: gRPC may hand
    # the server a cancel racing the stream's end as a clean end of the
    # requests, which the server cannot tell from an agent that stopped (seen
    # once in a few runs). Never anything else.
    def telemetry_calls(samples) -> dict[str, float]:
        return {
            dict(labels)["code"]: value
            for (name, labels), value in samples.items()
            if name == "railyard_api_requests_total" and dict(labels)["method"] == "ReportTelemetry"
        }

    counted_before = sum(telemetry_calls(before).values())
    deadline = time.monotonic() + 10
    while sum(telemetry_calls(ctl.metrics()).values()) <= counted_before:
        assert time.monotonic() < deadline, "the cancelled stream was never counted"
        time.sleep(0.1)
    grown = {
        code: n - telemetry_calls(before).get(code, 0)
        for code, n in telemetry_calls(ctl.metrics()).items()
        if n > telemetry_calls(before).get(code, 0)
    }
    assert grown in ({"CANCELLED": 1}, {"OK": 1}), grown
    after = ctl.metrics()
    assert total(after, "railyard_api_requests_total", code="INTERNAL") == total(
        before, "railyard_api_requests_total", code="INTERNAL"
    )


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """A daemon (no fabric attached) on mutual TLS, and its scheduler and operator clients."""
    tmp = tmp_path_factory.mktemp("fuzz-tls")
    certs.init_dir(tmp / "pki")
    (tmp / "policy.yaml").write_text("identities:\n  scheduler: scheduler\n  operator: operator\n")
    pki = tmp / "pki"
    with (
        api_daemon(tmp, *mutual_tls_args(pki, tmp / "policy.yaml"), tls=client_tls(pki, "operator")) as ctl,
        ctl.client(client_tls(pki, "scheduler")) as scheduler,
        ctl.client() as operator,
    ):
        yield scheduler, operator


class Both:
    """clear_intent's calls, each through the role that may make it."""

    def __init__(self, scheduler, operator) -> None:
        self.scheduler, self.operator = scheduler, operator

    def __getattr__(self, name: str):
        return getattr(self.scheduler if name == "release_job" else self.operator, name)


def test_raw_bytes_over_mutual_tls_get_documented_codes_and_authorization_comes_first(secure):
    scheduler, operator = secure
    baseline = state_of(operator)
    seen: Counter[grpc.StatusCode] = Counter()

    def channel_for(method: str):
        return scheduler.channel if method.startswith("/railyard.v1.PlacementService/") else operator.channel

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
    @given(method=st.sampled_from(UNARY), payload=st.binary(max_size=512))
    def fuzz(method, payload):
        code = call_raw(channel_for(method), method, payload)
        seen[code] += 1
        assert code in ALLOWED, (method, payload, code)
        if code == grpc.StatusCode.OK:
            clear_intent(Both(scheduler, operator))

    fuzz()
    assert sum(seen.values()) >= 200 and seen[grpc.StatusCode.INVALID_ARGUMENT] > 0
    # The role is checked before the bytes are even decoded.
    assert call_raw(scheduler.channel, "/railyard.v1.FabricService/DrainSwitch", b"\xff") == (
        grpc.StatusCode.PERMISSION_DENIED
    )
    assert state_of(operator) == baseline
