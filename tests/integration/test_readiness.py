"""Health per name on a real gRPC channel: the API is ready once intent is
loaded; the fabric's own name waits for every switch."""

import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from controller.api.server import FABRIC_HEALTH
from emulation.processes.controller_process import ControllerProcess, Ports

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def status(port: int, service: str) -> int:
    request = health_pb2.HealthCheckRequest(service=service)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return health_pb2_grpc.HealthStub(channel).Check(request, timeout=5).status


def wait_for(port: int, service: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while status(port, service) != SERVING:
        assert time.monotonic() < deadline, f"{service or 'the server'} never became ready"
        time.sleep(0.1)


def test_with_no_switch_connected_placement_is_ready_and_the_fabric_is_not(tmp_path):
    # A daemon for the demo fabric on ports no switch points at: every switch is down.
    ctl = ControllerProcess(None, tmp_path / "intent.db", Ports.pick(), tmp_path / "controller.log").start()
    try:
        ctl.wait_serving_api()
        wait_for(ctl.ports.grpc, "railyard.v1.PlacementService")
        assert status(ctl.ports.grpc, "") == SERVING
        with ctl.client() as client:
            assert client.place_job("ready", 2, "ring").job.job_id == "ready"  # and it answers
        time.sleep(2)
        assert status(ctl.ports.grpc, FABRIC_HEALTH) == NOT_SERVING
    finally:
        ctl.stop()


def test_with_every_switch_reconciled_the_fabric_is_ready(ctl):
    wait_for(ctl.ports.grpc, FABRIC_HEALTH)
    assert status(ctl.ports.grpc, "railyard.v1.PlacementService") == SERVING
