"""FabricService: topology, live link state, drains and flow pins."""

from __future__ import annotations

from collections.abc import Callable, Collection

from controller.api.errors import rpc
from controller.api.gen.railyard.v1 import common_pb2
from controller.api.gen.railyard.v1 import fabric_pb2 as pb
from controller.api.gen.railyard.v1 import fabric_pb2_grpc as pb_grpc
from controller.api.paging import page
from controller.fabric import Endpoint
from controller.fabric import addressing as ad
from controller.intent.drains import DrainTarget
from controller.intent.model import FlowMatch, FlowPin, IntentError, parse_nic
from controller.intent.service import IntentService
from controller.schedulers.hosts import HostMap
from controller.te.capacity import FreeCapacity, PodFree
from controller.te.load import jobs_load, link_name
from controller.te.view import PortSample

PROTOCOL_NAMES = {common_pb2.PROTOCOL_UNSPECIFIED: "", common_pb2.PROTOCOL_TCP: "tcp", common_pb2.PROTOCOL_UDP: "udp"}
PROTOCOL_ENUMS = {v: k for k, v in PROTOCOL_NAMES.items()}


def pin_from_proto(service: IntentService, msg: pb.FlowPin) -> FlowPin:
    if not msg.HasField("match"):
        raise IntentError("pin.match", "is missing", "a FlowMatch with src_address and dst_address")
    m = msg.match
    if m.protocol not in PROTOCOL_NAMES:
        raise IntentError(
            "pin.match.protocol",
            f"unknown enum value {m.protocol}",
            ", ".join(common_pb2.Protocol.Name(v) for v in PROTOCOL_NAMES),
        )
    match = FlowMatch(
        parse_nic(service.fabric, m.src_address, "pin.match.src_address"),
        parse_nic(service.fabric, m.dst_address, "pin.match.dst_address"),
        PROTOCOL_NAMES[m.protocol],
        m.src_port,
        m.dst_port,
    )
    return FlowPin(msg.name, match, msg.spine, symmetric=not msg.forward_only)


def pod_capacity_to_proto(pod: PodFree) -> pb.PodCapacity:
    return pb.PodCapacity(
        pod=pod.pod,
        gpu_count=pod.gpus,
        free_gpu_count=pod.free_gpus,
        whole_free_servers=pod.whole_servers_free,
        partly_free_servers=pod.partly_free_servers,
    )


def free_capacity_to_proto(
    capacity: FreeCapacity,
    revision: int,
    pods: Collection[int] = (),
    include_full_servers: bool = False,
    hosts: HostMap | None = None,
) -> pb.GetFreeCapacityResponse:
    """The figures, narrowed to `pods` (empty: all)."""
    wanted = [p for p in capacity.pods if not pods or p.pod in pods]
    reply = pb.GetFreeCapacityResponse(
        gpu_count=sum(p.gpus for p in wanted),
        free_gpu_count=sum(p.free_gpus for p in wanted),
        whole_free_servers=sum(p.whole_servers_free for p in wanted),
        partly_free_servers=sum(p.partly_free_servers for p in wanted),
        pods=[pod_capacity_to_proto(p) for p in wanted],
        intent_revision=revision,
    )
    for s in capacity.servers:
        if (not pods or s.pod in pods) and (include_full_servers or s.free_gpus):
            reply.servers.add(
                server=s.name,
                node=hosts.node(s.name) if hosts else s.name,
                pod=s.pod,
                index=s.index,
                gpu_count=s.gpus,
                free_gpu_count=s.free_gpus,
                free_rails=s.free_rails,
                exclusive=s.exclusive,
            )
    return reply


def pin_to_proto(pin: FlowPin) -> pb.FlowPin:
    m = pin.match
    return pb.FlowPin(
        name=pin.name,
        spine=pin.spine,
        forward_only=not pin.symmetric,
        match=pb.FlowMatch(
            src_address=ad.nic_ip(m.src),
            dst_address=ad.nic_ip(m.dst),
            protocol=PROTOCOL_ENUMS[m.protocol],
            src_port=m.src_port,
            dst_port=m.dst_port,
        ),
    )


class FabricServicer(pb_grpc.FabricServiceServicer):
    def __init__(
        self,
        service: IntentService,
        metrics,
        connected: Callable[[], set[str]],
        live_ports: Callable[[], dict[Endpoint, PortSample]],
        hosts: HostMap | None = None,
    ) -> None:
        self.service = service
        self.hosts = hosts
        self.metrics = metrics
        self._connected = connected
        self._live_ports = live_ports

    @rpc
    def GetFabric(self, request, context):
        fabric, intent = self.service.fabric, self.service.snapshot()
        connected = self._connected()
        capacity, _ = self.service.free_capacity()
        reply = pb.GetFabricResponse(
            name=fabric.spec.name,
            kind=fabric.spec.kind.value,
            gpu_count=fabric.gpu_count,
            rails=fabric.rails,
            pods=len({s.pod for s in fabric.servers}),
            nic_gbps=fabric.spec.rates.nic_gbps,
            free_gpu_count=capacity.free_gpus,
            pod_capacity=[pod_capacity_to_proto(p) for p in capacity.pods],
        )
        for sw in sorted(fabric.switches.values(), key=lambda s: s.name):
            rail = sw.rail if sw.rail is not None else (sw.plane if sw.plane is not None else -1)
            reply.switches.add(
                name=sw.name,
                tier=sw.tier.value,
                pod=-1 if sw.pod is None else sw.pod,
                rail=rail,
                dpid=ad.dpid_hex(sw.dpid),
                connected=sw.name in connected,
                drained=sw.name in intent.drains.switches,
            )
        return reply

    @rpc
    def GetFreeCapacity(self, request, context):
        if request.pods:
            known = {s.pod for s in self.service.fabric.servers}
            for i, pod in enumerate(request.pods):
                if pod not in known:
                    raise IntentError(f"pods[{i}]", f"{pod} is not a pod of this fabric", f"0 to {max(known)}")
        capacity, revision = self.service.free_capacity(all_servers=request.include_full_servers)
        return free_capacity_to_proto(capacity, revision, set(request.pods), request.include_full_servers, self.hosts)

    @rpc
    def ListLinks(self, request, context):
        fabric, intent = self.service.fabric, self.service.snapshot()
        if request.switch and request.switch not in fabric.switches:
            raise IntentError(
                "switch",
                f"{request.switch!r} is not a switch of this fabric",
                "a name from GetFabric, or empty for all",
            )
        links = [
            link
            for link in fabric.links
            if (request.include_access or not link.is_access)
            and (not request.switch or request.switch in (link.a.node, link.b.node))
        ]
        named = sorted((link_name(fabric, link), link) for link in links)
        scope = f"ListLinks?switch={request.switch}&include_access={request.include_access}"
        items, token = page(named, request.page_size, request.page_token, key=lambda item: item[0], scope=scope)
        predicted = jobs_load(fabric, intent.jobs.values())
        live = self._live_ports()
        reply = pb.ListLinksResponse(next_page_token=token)
        for name, link in items:
            out = reply.links.add(
                name=name,
                a_node=link.a.node,
                a_port=link.a.port,
                b_node=link.b.node,
                b_port=link.b.port,
                capacity_bps=link.capacity_bps,
                access=link.is_access,
                drained=name in intent.drains.links,
            )
            for egress in (link.a, link.b):
                sample = live.get(egress)
                measured = sample.tx_bps if sample else 0.0
                d = out.directions.add(
                    from_node=egress.node,
                    from_port=egress.port,
                    predicted_bps=predicted.get(egress, 0.0),
                    measured_bps=measured,
                    queue_bytes=sample.queue_bytes if sample else 0,
                    utilization_ratio=max(predicted.get(egress, 0.0), measured) / link.capacity_bps,
                )
                if sample:
                    d.measure_time.FromNanoseconds(int(sample.observed_at * 1e9))
        return reply

    def _drain(self, target: DrainTarget, name: str, drained: bool):
        canonical, moved = self.service.set_drain(target, name, drained)
        return canonical, [job.job_id for job in moved], self.service.snapshot().revision

    @rpc
    def DrainLink(self, request, context):
        link, moved, revision = self._drain(DrainTarget.LINK, request.link, True)
        return pb.DrainLinkResponse(link=link, rerouted_job_ids=moved, intent_revision=revision)

    @rpc
    def UndrainLink(self, request, context):
        link, _, revision = self._drain(DrainTarget.LINK, request.link, False)
        return pb.UndrainLinkResponse(link=link, intent_revision=revision)

    @rpc
    def DrainSwitch(self, request, context):
        switch, moved, revision = self._drain(DrainTarget.SWITCH, request.switch, True)
        return pb.DrainSwitchResponse(switch=switch, rerouted_job_ids=moved, intent_revision=revision)

    @rpc
    def UndrainSwitch(self, request, context):
        switch, _, revision = self._drain(DrainTarget.SWITCH, request.switch, False)
        return pb.UndrainSwitchResponse(switch=switch, intent_revision=revision)

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
        items, token = page(pins, request.page_size, request.page_token, key=lambda p: p.name, scope="ListPins")
        return pb.ListPinsResponse(pins=[pin_to_proto(p) for p in items], next_page_token=token)
