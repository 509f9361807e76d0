"""The gRPC server: services, health, reflection, limits."""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from controller.api.audit import AuditLog
from controller.api.auth import Authorize
from controller.api.fabric import FabricServicer
from controller.api.gen.railyard.v1 import (
    fabric_pb2,
    fabric_pb2_grpc,
    placement_pb2,
    placement_pb2_grpc,
    te_pb2,
    te_pb2_grpc,
    telemetry_pb2,
    telemetry_pb2_grpc,
)
from controller.api.limits import MUTATIONS_PER_S, TELEMETRY_RECORDS_PER_S, MutationLimiter
from controller.api.placement import MAX_WATCHERS, PlacementServicer
from controller.api.te import MAX_WATCHERS as TE_WATCHERS
from controller.api.te import DecisionFeed, TeServicer
from controller.api.telemetry import TelemetryServicer
from controller.errors import FieldError
from controller.intent.service import IntentService
from controller.metrics import Metrics
from controller.schedulers.hosts import HostMap
from controller.security.policy import Policy
from controller.security.tokens import Tokens
from controller.telemetry.ingest import TelemetryIngest

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_CONCURRENT_RPCS = 64
WORKERS = 8 + MAX_WATCHERS + TE_WATCHERS  # watch streams each hold a worker; unary calls keep 8


class RequestError(FieldError):
    context = "request"


# A health name of its own for the southbound: every switch connected and
# reconciled. Schedulers' and Kubernetes' readiness use the API's names; a
# switch that is down does not stop placement from answering.
FABRIC_HEALTH = "railyard.fabric"
# SERVING on the replica that leads (takes mutations); NOT_SERVING on followers.
LEADER_HEALTH = "railyard.leader"


def _status(up: bool) -> int:
    return health_pb2.HealthCheckResponse.SERVING if up else health_pb2.HealthCheckResponse.NOT_SERVING


SERVICE_NAMES = tuple(
    module.DESCRIPTOR.services_by_name[name].full_name
    for module, name in (
        (fabric_pb2, "FabricService"),
        (placement_pb2, "PlacementService"),
        (telemetry_pb2, "TelemetryService"),
        (te_pb2, "TeService"),
    )
)


class DecodeErrorsAreInvalidArgument(grpc.ServerInterceptor):
    """grpcio answers a request it cannot deserialize with INTERNAL; a malformed
    message is the client's fault, so parse inside the handler and say
    INVALID_ARGUMENT instead."""

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        parse = handler.request_deserializer
        method = handler_call_details.method.rsplit("/", 1)[-1]

        def decode(raw: bytes):
            try:
                return parse(raw)
            except Exception:
                raise RequestError(
                    "request",
                    f"is not a valid {method} request message",
                    "a serialized protobuf message of the request type",
                ) from None

        def single(behavior):
            def handle(raw, context):
                try:
                    request = decode(raw)
                except RequestError as exc:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
                return behavior(request, context)

            return handle

        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(single(handler.unary_unary), None, handler.response_serializer)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(single(handler.unary_stream), None, handler.response_serializer)
        if handler.stream_unary:
            behavior = handler.stream_unary
            # Decoded lazily inside the servicer's loop: a bad message surfaces
            # as a RequestError there, which the servicer maps like any other.
            return grpc.stream_unary_rpc_method_handler(
                lambda raws, context: behavior((decode(raw) for raw in raws), context),
                None,
                handler.response_serializer,
            )
        return handler


@dataclass(frozen=True)
class MutualTls:
    """The API over TLS with client certificates: the server's certificate and
    key, the CA client certificates must chain to, and who holds which role.
    With `tokens` and a token listener, clients without a certificate
    authenticate there with a bearer token instead."""

    cert: bytes
    key: bytes
    ca: bytes
    policy: Policy
    tokens: Tokens | None = None
    token_listen: str | None = None  # HOST:PORT: TLS without client certificates, bearer tokens


class ApiServer:
    def __init__(
        self,
        service: IntentService,
        ingest: TelemetryIngest,
        metrics: Metrics,
        connected: Callable[[], set[str]],
        listen: str,
        message_bytes: int = MAX_MESSAGE_BYTES,
        tls: MutualTls | None = None,
        audit: AuditLog | None = None,
        mutations_per_s: float = MUTATIONS_PER_S,
        telemetry_records_per_s: float = TELEMETRY_RECORDS_PER_S,
        hosts: HostMap | None = None,
        decisions: DecisionFeed | None = None,
    ) -> None:
        # Authorization runs first: a caller who may not call a method gets no
        # further, not even to have its request decoded.
        interceptors: list[grpc.ServerInterceptor] = (
            [] if tls is None else [Authorize(tls.policy, metrics, audit, tls.tokens)]
        )
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="grpc"),
            maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS,
            interceptors=[*interceptors, DecodeErrorsAreInvalidArgument()],
            options=[
                ("grpc.max_receive_message_length", message_bytes),
                ("grpc.max_send_message_length", message_bytes),
                ("grpc.so_reuseport", 0),
            ],
        )
        servicers = (
            FabricServicer(service, metrics, connected, ingest.fresh_ports, hosts),
            PlacementServicer(service, metrics, message_bytes, hosts),
            TelemetryServicer(service.fabric, ingest, metrics, telemetry_records_per_s),
        )
        limiter = MutationLimiter(mutations_per_s)
        for servicer in servicers:
            servicer.audit = audit  # each mutation's outcome, and who asked (errors.rpc)
            servicer.limiter = limiter  # one budget per caller across the services
        fabric_pb2_grpc.add_FabricServiceServicer_to_server(servicers[0], self.server)
        placement_pb2_grpc.add_PlacementServiceServicer_to_server(servicers[1], self.server)
        telemetry_pb2_grpc.add_TelemetryServiceServicer_to_server(servicers[2], self.server)
        te_pb2_grpc.add_TeServiceServicer_to_server(TeServicer(decisions or DecisionFeed()), self.server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server)
        if tls is None:
            self.port = self.server.add_insecure_port(listen)
        else:
            credentials = grpc.ssl_server_credentials([(tls.key, tls.cert)], tls.ca, require_client_auth=True)
            self.port = self.server.add_secure_port(listen, credentials)
        if not self.port:
            raise OSError(f"cannot listen for gRPC on {listen}")
        self.token_port = 0
        if tls is not None and tls.token_listen is not None:
            # gRPC's Python server cannot make a client certificate optional
            # on one port, so certificate-less clients get a port of their own.
            server_only = grpc.ssl_server_credentials([(tls.key, tls.cert)])
            self.token_port = self.server.add_secure_port(tls.token_listen, server_only)
            if not self.token_port:
                raise OSError(f"cannot listen for gRPC (bearer tokens) on {tls.token_listen}")
        self.set_serving(False)
        self.set_fabric_ready(False)

    def set_serving(self, serving: bool) -> None:
        """The API's own readiness ("" and each service): intent is loaded and
        requests are answered. Placement does not wait for the switches."""
        for name in ("", *SERVICE_NAMES):
            self.health.set(name, _status(serving))

    def set_fabric_ready(self, ready: bool) -> None:
        """FABRIC_HEALTH: every switch of the fabric connected and reconciled."""
        self.health.set(FABRIC_HEALTH, _status(ready))

    def set_leader(self, leading: bool) -> None:
        self.health.set(LEADER_HEALTH, _status(leading))

    def start(self) -> None:
        self.server.start()

    def stop(self, grace_s: float) -> None:
        self.set_serving(False)
        self.set_fabric_ready(False)
        self.server.stop(grace_s).wait(grace_s + 1)
