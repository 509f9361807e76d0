"""Python client for the Railyard gRPC API (used by the CLI and tests)."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from controller.api.gen.railyard.v1 import fabric_pb2 as pb
from controller.api.gen.railyard.v1 import fabric_pb2_grpc as pb_grpc

DEFAULT_TARGET = "127.0.0.1:50051"
DEFAULT_TIMEOUT_S = 10.0


class Client:
    def __init__(self, target: str = DEFAULT_TARGET, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.channel = grpc.insecure_channel(target)
        self.timeout = timeout_s
        self.fabric = pb_grpc.FabricServiceStub(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def serving(self) -> bool:
        try:
            reply = self._health.Check(health_pb2.HealthCheckRequest(service=""), timeout=self.timeout)
        except grpc.RpcError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    def pin_flow(self, name: str, src: str, dst: str, spine: str, protocol: str = "", src_port: int = 0,
                 dst_port: int = 0, forward_only: bool = False) -> pb.PinFlowResponse:
        match = pb.FlowMatch(src_address=src, dst_address=dst, src_port=src_port, dst_port=dst_port,
                             protocol=pb.Protocol.Value(f"PROTOCOL_{(protocol or 'unspecified').upper()}"))
        pin = pb.FlowPin(name=name, match=match, spine=spine, forward_only=forward_only)
        return self.fabric.PinFlow(pb.PinFlowRequest(pin=pin), timeout=self.timeout)

    def unpin_flow(self, name: str) -> pb.UnpinFlowResponse:
        return self.fabric.UnpinFlow(pb.UnpinFlowRequest(name=name), timeout=self.timeout)

    def list_pins(self) -> list[pb.FlowPin]:
        pins, token = [], ""
        while True:
            reply = self.fabric.ListPins(pb.ListPinsRequest(page_token=token), timeout=self.timeout)
            pins.extend(reply.pins)
            token = reply.next_page_token
            if not token:
                return pins
