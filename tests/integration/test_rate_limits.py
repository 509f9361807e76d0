"""Rate limits on the real daemon (no fabric): a caller's mutations, and a
caller's telemetry records over all its streams, answered
RESOURCE_EXHAUSTED with when to retry."""

import time

import grpc
import pytest

from controller.api.gen.railyard.v1 import telemetry_pb2 as tpb
from controller.intent.drains import DrainTarget
from emulation.processes.controller_process import total
from tests.integration.helpers import api_daemon


@pytest.fixture
def daemon(tmp_path):
    limits = ("--mutations-per-second", "1", "--telemetry-records-per-second", "10")  # bursts of 2 and 10
    with api_daemon(tmp_path, *limits) as ctl:
        yield ctl


def test_a_caller_over_its_mutation_rate_is_told_when_to_retry_and_reads_are_not_limited(daemon):
    with daemon.client() as client:
        client.drain(DrainTarget.SWITCH, "rys0")
        client.drain(DrainTarget.SWITCH, "rys0", drained=False)  # the burst (2) is spent
        with pytest.raises(grpc.RpcError) as err:
            client.drain(DrainTarget.SWITCH, "rys0")
        assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "over 1 mutations per second" in (err.value.details() or "")
        trailers = err.value.trailing_metadata() or ()
        pushback = [int(m.value) for m in trailers if m.key == "grpc-retry-pushback-ms"]
        assert len(pushback) == 1 and 0 < pushback[0] <= 1001
        # Reads are not limited, and the refused drain did nothing.
        assert [s.name for s in client.get_fabric().switches if s.drained] == []
    assert total(daemon.metrics(), "railyard_api_rate_limited_total", method="DrainSwitch") == 1


def test_a_callers_telemetry_a_little_over_waits_far_over_is_cut_and_a_new_stream_waits_out_the_refill(daemon):
    def batch(n: int) -> tpb.TelemetryBatch:
        return tpb.TelemetryBatch(hops=[tpb.HopRecord(switch="ryl0r0", egress_port=3, tx_bps=1e9)] * n)

    with daemon.client() as client:
        # The burst (10), then 2 more: a little over, so that batch waits its turn.
        started = time.monotonic()
        assert client.report_telemetry([batch(10), batch(2)]).accepted_records == 12
        assert time.monotonic() - started >= 0.15
        with pytest.raises(grpc.RpcError) as err:
            client.report_telemetry([batch(15)])  # far over: cut
        assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "over 10 telemetry records per second for this caller" in (err.value.details() or "")
        trailers = err.value.trailing_metadata() or ()
        pushback = [int(m.value) for m in trailers if m.key == "grpc-retry-pushback-ms"]
        assert len(pushback) == 1 and 900 <= pushback[0] <= 1300  # until its bucket (10) is full again
        # A new stream at once brings no fresh budget: it is held until the refill.
        started = time.monotonic()
        assert client.report_telemetry([batch(1)]).accepted_records == 1
        assert time.monotonic() - started >= 0.8
    assert total(daemon.metrics(), "railyard_api_rate_limited_total", method="ReportTelemetry") == 1
