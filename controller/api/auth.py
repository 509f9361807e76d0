"""Authentication and authorization of every call: who is calling (the
verified client certificate's common name) and whether their role may call
this method (controller/security/policy.py).

A call with no identity is UNAUTHENTICATED; an identity the policy does not
name, or a role that may not call the method, is PERMISSION_DENIED. Both are
answered before the servicer runs, so a refused call changes nothing, and
both are counted (railyard_api_denied_total).
"""

from __future__ import annotations

import logging

import grpc

from controller.metrics import Metrics
from controller.security.policy import Policy

log = logging.getLogger(__name__)


def peer_identity(context) -> str | None:
    """The common name of the client's certificate, which the TLS handshake
    verified against the CA; None without one."""
    names = context.auth_context().get("x509_common_name") or []
    return names[0].decode() if names else None


class Authorize(grpc.ServerInterceptor):
    def __init__(self, policy: Policy, metrics: Metrics) -> None:
        self.policy = policy
        self.metrics = metrics

    def _refusal(self, method: str, context) -> tuple[grpc.StatusCode, str] | None:
        identity = peer_identity(context)
        if identity is None:
            return grpc.StatusCode.UNAUTHENTICATED, "no client identity: present a client certificate signed by the CA"
        role = self.policy.role_of(identity)
        if role is None:
            return grpc.StatusCode.PERMISSION_DENIED, f"identity {identity[:64]!r} has no role in the policy"
        if not self.policy.allows(role, method):
            name = method.rsplit("/", 1)[-1]
            return grpc.StatusCode.PERMISSION_DENIED, f"role {role} may not call {name} (identity {identity[:64]!r})"
        return None

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method

        def guard(behavior):
            def check(request, context):
                refusal = self._refusal(method, context)
                if refusal is not None:
                    code, details = refusal
                    self.metrics.api_denied.labels(method.rsplit("/", 1)[-1], code.name).inc()
                    log.warning("denied %s: %s", method, details)
                    context.abort(code, details)
                return behavior(request, context)

            return check

        if handler.unary_unary:
            return handler._replace(unary_unary=guard(handler.unary_unary))
        if handler.unary_stream:
            return handler._replace(unary_stream=guard(handler.unary_stream))
        if handler.stream_unary:
            return handler._replace(stream_unary=guard(handler.stream_unary))
        if handler.stream_stream:
            return handler._replace(stream_stream=guard(handler.stream_stream))
        return handler
