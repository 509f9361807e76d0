"""The gRPC server: services, health, reflection, limits."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from controller.api import reflection
from controller.api.audit import AuditLog, is_mutation
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
from controller.api.limits import (
    MUTATIONS_PER_S,
    TELEMETRY_RECORDS_PER_S,
    TELEMETRY_STREAMS_PER_CALLER,
    MutationLimiter,
)
from controller.api.listener import CannotListen, bind_problem
from controller.api.placement import MAX_WATCHERS, PlacementServicer
from controller.api.refusals import peer_address
from controller.api.te import MAX_WATCHERS as TE_WATCHERS
from controller.api.te import DecisionFeed, TeServicer
from controller.api.telemetry import MAX_STREAMS, TelemetryServicer
from controller.errors import FieldError
from controller.intent.service import IntentService
from controller.metrics import Metrics
from controller.schedulers.hosts import HostMap
from controller.security.policy import Policy
from controller.security.tokens import Tokens
from controller.telemetry.ingest import TelemetryIngest

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
UNARY_WORKERS = 8
# Watch (jobs, TE decisions) and telemetry streams each hold a worker for as long as they are
# open, and each kind is capped: unary calls (placement) always keep
# UNARY_WORKERS of their own, however many agents stream.
WORKERS = UNARY_WORKERS + MAX_WATCHERS + TE_WATCHERS + MAX_STREAMS
MAX_CONCURRENT_RPCS = WORKERS + 16  # beyond the workers, a few calls wait for one rather than fail


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
    INVALID_ARGUMENT instead. It is counted, and a mutation's is audited:
    a refused change is a change someone tried."""

    def __init__(self, metrics: Metrics | None = None, audit: AuditLog | None = None) -> None:
        self.metrics = metrics
        self.audit = audit

    def _refused(self, method: str, context) -> None:
        if self.metrics is not None:
            self.metrics.api_requests.labels(method, "INVALID_ARGUMENT").inc()
        if self.audit is not None and is_mutation(method):
            caller = getattr(context, "caller", None)  # auth.CallerContext, under mutual TLS
            self.audit.record(
                identity=caller.identity if caller else None,
                role=caller.grant.role if caller else None,
                method=method,
                code="INVALID_ARGUMENT",
                peer=peer_address(context),
            )

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
                    self._refused(method, context)
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


class _Certificates:
    """A listener's certificate, key and client CA, which gRPC asks for before
    each new handshake: a reload (SIGHUP) changes what the next connection
    is offered and checked against, and no connection already made."""

    def __init__(self, tls: MutualTls, client_ca: bool) -> None:
        self._client_ca = client_ca
        self._pending: grpc.ServerCertificateConfiguration | None = None
        self._lock = threading.Lock()
        self.initial = self._config(tls)

    def _config(self, tls: MutualTls) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration([(tls.key, tls.cert)], tls.ca if self._client_ca else None)

    def credentials(self) -> grpc.ServerCredentials:
        # grpc's stubs want a configuration back; None (keep the one in use) is what its docs specify.
        return grpc.dynamic_ssl_server_credentials(self.initial, self._fetch, self._client_ca)  # type: ignore[arg-type]

    def replace(self, tls: MutualTls) -> None:
        with self._lock:
            self._pending = self._config(tls)

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        with self._lock:  # None: keep the configuration in use
            pending, self._pending = self._pending, None
        return pending


def _add_port(add: Callable[[], int], flag: str, listen: str) -> int:
    """The port `add()` bound; CannotListen naming `flag` if it bound none
    (grpcio returns 0, or raises RuntimeError, saying only "failed to bind",
    after logging its own lines: a port that is taken is not even tried)."""
    host, _, port_text = listen.rpartition(":")
    if port_text.isdigit() and int(port_text) and bind_problem(host.strip("[]"), int(port_text)):
        raise CannotListen(flag, listen)
    try:
        port = add()
    except RuntimeError:
        port = 0
    if not port:
        raise CannotListen(flag, listen)
    return port


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
        telemetry_streams_per_caller: int = TELEMETRY_STREAMS_PER_CALLER,
        decisions: DecisionFeed | None = None,
    ) -> None:
        # Authorization runs first: a caller who may not call a method gets no
        # further, not even to have its request decoded.
        self.authorize = Authorize(tls.policy, metrics, audit, tls.tokens) if tls is not None else None
        interceptors: list[grpc.ServerInterceptor] = [] if self.authorize is None else [self.authorize]
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="grpc"),
            maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS,
            interceptors=[*interceptors, DecodeErrorsAreInvalidArgument(metrics, audit)],
            options=[
                ("grpc.max_receive_message_length", message_bytes),
                ("grpc.max_send_message_length", message_bytes),
                ("grpc.so_reuseport", 0),
            ],
        )
        servicers = (
            FabricServicer(service, metrics, connected, ingest.fresh_ports, hosts),
            PlacementServicer(service, metrics, message_bytes, hosts),
            TelemetryServicer(service.fabric, ingest, metrics, telemetry_records_per_s, telemetry_streams_per_caller),
        )
        limiter = MutationLimiter(mutations_per_s)
        for servicer in servicers:
            servicer.audit = audit  # each mutation's outcome, and who asked (errors.rpc)
            servicer.limiter = limiter  # one budget per caller across the services
        for servicer in servicers[:2]:  # placement and fabric calls go ahead of telemetry and TE
            servicer.priority = ingest.priority
        fabric_pb2_grpc.add_FabricServiceServicer_to_server(servicers[0], self.server)
        placement_pb2_grpc.add_PlacementServiceServicer_to_server(servicers[1], self.server)
        telemetry_pb2_grpc.add_TelemetryServiceServicer_to_server(servicers[2], self.server)
        te_pb2_grpc.add_TeServiceServicer_to_server(TeServicer(decisions or DecisionFeed()), self.server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable((*SERVICE_NAMES, health.SERVICE_NAME), self.server)
        self._certificates: list[_Certificates] = []
        if tls is None:
            self.port = _add_port(lambda: self.server.add_insecure_port(listen), "grpc-listen", listen)
        else:
            mutual = _Certificates(tls, client_ca=True)
            self._certificates.append(mutual)
            credentials = mutual.credentials()
            self.port = _add_port(lambda: self.server.add_secure_port(listen, credentials), "grpc-listen", listen)
        self.token_port = 0
        if tls is not None and tls.token_listen is not None:
            # gRPC's Python server cannot make a client certificate optional
            # on one port, so certificate-less clients get a port of their own.
            server_only = _Certificates(tls, client_ca=False)
            self._certificates.append(server_only)
            token_credentials = server_only.credentials()
            token_listen = tls.token_listen
            self.token_port = _add_port(
                lambda: self.server.add_secure_port(token_listen, token_credentials), "grpc-token-listen", token_listen
            )
        self.set_serving(False)
        self.set_fabric_ready(False)

    def reload_tls(self, tls: MutualTls) -> None:
        """New certificates, CA, policy and tokens (SIGHUP), for the
        connections and calls that follow; none already made is dropped."""
        if self.authorize is None:
            raise ValueError("the API was started without TLS: there is nothing to reload")
        for certificates in self._certificates:
            certificates.replace(tls)
        self.authorize.reload(tls.policy, tls.tokens)

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
