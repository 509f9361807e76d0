"""Rate limits on the real daemon (no fabric): a caller's mutations, and a
caller's telemetry records over all its streams, answered
RESOURCE_EXHAUSTED with when to retry."""

import grpc
import pytest

from controller.api.gen.railyard.v1 import telemetry_pb2 as tpb
from emulation.processes.controller_process import total
from tests.integration.helpers import api_daemon


@pytest.fixture
def daemon(tmp_path):
    limits = ("--mutations-per-second", "1", "--telemetry-records-per-second", "10")  # bursts of 2 and 20
    with api_daemon(tmp_path, *limits) as ctl:
        yield ctl


def test_a_caller_over_its_mutation_rate_is_told_when_to_retry_and_reads_are_not_limited(daemon):
    with daemon.client() as client:
        client.drain("switch", "rys0")
        client.drain("switch", "rys0", drained=False)  # the burst (2) is spent
        with pytest.raises(grpc.RpcError) as err:
            client.drain("switch", "rys0")
        assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "over 1 mutations per second" in (err.value.details() or "")
        trailers = err.value.trailing_metadata() or ()
        pushback = [int(m.value) for m in trailers if m.key == "grpc-retry-pushback-ms"]
        assert len(pushback) == 1 and 0 < pushback[0] <= 1001
        # Reads are not limited, and the refused drain did nothing.
        assert [s.name for s in client.get_fabric().switches if s.drained] == []
    assert total(daemon.metrics(), "railyard_api_rate_limited_total", method="DrainSwitch") == 1


def test_a_telemetry_stream_over_its_callers_record_rate_is_ended_and_a_new_one_waits_out_the_refill(daemon):
    def batch(n: int) -> tpb.TelemetryBatch:
        return tpb.TelemetryBatch(hops=[tpb.HopRecord(switch="ryl0r0", egress_port=3, tx_bps=1e9)] * n)

    with daemon.client() as client:
        assert client.report_telemetry([batch(10), batch(10)]).accepted_records == 20
        with pytest.raises(grpc.RpcError) as err:
            client.report_telemetry([batch(15), batch(15)])
        assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "over 10 telemetry records per second for this caller" in (err.value.details() or "")
        trailers = err.value.trailing_metadata() or ()
        pushback = [int(m.value) for m in trailers if m.key == "grpc-retry-pushback-ms"]
        assert len(pushback) == 1 and 1000 <= pushback[0] <= 2001  # until its bucket (20) is full again
        with pytest.raises(grpc.RpcError) as again:  # a new stream at once brings no fresh budget
            client.report_telemetry([batch(1)])
        assert again.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert total(daemon.metrics(), "railyard_api_rate_limited_total", method="ReportTelemetry") == 2
