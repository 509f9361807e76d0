"""FabricService: operator intent on the fabric (pins for now)."""

from __future__ import annotations

from controller.api.errors import rpc
from controller.api.gen.railyard.v1 import fabric_pb2 as pb
from controller.api.gen.railyard.v1 import fabric_pb2_grpc as pb_grpc
from controller.api.paging import page
from controller.intent import FlowMatch, FlowPin, IntentError, parse_nic
from controller.fabric import addressing as ad
from controller.service import IntentService

PROTOCOL_NAMES = {pb.PROTOCOL_UNSPECIFIED: "", pb.PROTOCOL_TCP: "tcp", pb.PROTOCOL_UDP: "udp"}
PROTOCOL_ENUMS = {v: k for k, v in PROTOCOL_NAMES.items()}


def pin_from_proto(service: IntentService, msg: pb.FlowPin) -> FlowPin:
    if not msg.HasField("match"):
        raise IntentError("pin.match", "is missing", "a FlowMatch with src_address and dst_address")
    m = msg.match
    if m.protocol not in PROTOCOL_NAMES:
        raise IntentError("pin.match.protocol", f"unknown enum value {m.protocol}",
                          ", ".join(pb.Protocol.Name(v) for v in PROTOCOL_NAMES))
    match = FlowMatch(
        parse_nic(service.fabric, m.src_address, "pin.match.src_address"),
        parse_nic(service.fabric, m.dst_address, "pin.match.dst_address"),
        PROTOCOL_NAMES[m.protocol], m.src_port, m.dst_port,
    )
    return FlowPin(msg.name, match, msg.spine, symmetric=not msg.forward_only)


def pin_to_proto(pin: FlowPin) -> pb.FlowPin:
    m = pin.match
    return pb.FlowPin(
        name=pin.name, spine=pin.spine, forward_only=not pin.symmetric,
        match=pb.FlowMatch(src_address=str(ad.nic_address(m.src)), dst_address=str(ad.nic_address(m.dst)),
                           protocol=PROTOCOL_ENUMS[m.protocol], src_port=m.src_port, dst_port=m.dst_port),
    )


class FabricServicer(pb_grpc.FabricServiceServicer):
    def __init__(self, service: IntentService) -> None:
        self.service = service

    @rpc
    def PinFlow(self, request, context):
        pin = self.service.pin_flow(pin_from_proto(self.service, request.pin))
        return pb.PinFlowResponse(pin=pin_to_proto(pin), intent_revision=self.service.snapshot().revision)

    @rpc
    def UnpinFlow(self, request, context):
        pin = self.service.unpin(request.name)
        return pb.UnpinFlowResponse(pin=pin_to_proto(pin), intent_revision=self.service.snapshot().revision)

    @rpc
    def ListPins(self, request, context):
        pins = sorted(self.service.snapshot().pins.values())
        items, token = page(pins, request.page_size, request.page_token, key=lambda p: p.name)
        return pb.ListPinsResponse(pins=[pin_to_proto(p) for p in items], next_page_token=token)
