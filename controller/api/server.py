"""The gRPC server: services, health, reflection, limits."""

from __future__ import annotations

from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from controller.api.fabric import FabricServicer
from controller.api.gen.railyard.v1 import fabric_pb2, fabric_pb2_grpc
from controller.service import IntentService

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_CONCURRENT_RPCS = 64
WORKERS = 8
SERVICE_NAMES = (fabric_pb2.DESCRIPTOR.services_by_name["FabricService"].full_name,)


class ApiServer:
    def __init__(self, service: IntentService, listen: str) -> None:
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="grpc"),
            maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS,
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                     ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                     ("grpc.so_reuseport", 0)],
        )
        fabric_pb2_grpc.add_FabricServiceServicer_to_server(FabricServicer(service), self.server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME),
                                            self.server)
        self.port = self.server.add_insecure_port(listen)
        if not self.port:
            raise OSError(f"cannot listen for gRPC on {listen}")
        self.set_serving(False)

    def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", *SERVICE_NAMES):
            self.health.set(name, status)

    def start(self) -> None:
        self.server.start()

    def stop(self, grace_s: float) -> None:
        self.set_serving(False)
        self.server.stop(grace_s).wait(grace_s + 1)
