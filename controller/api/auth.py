"""Authentication and authorization of every call: who is calling (the
verified client certificate's common name, or on the token listener the
holder of a bearer token) and whether their role may call this method
(controller/security/policy.py).

A call with no identity is UNAUTHENTICATED; an identity the policy does not
name, or a role that may not call the method, is PERMISSION_DENIED. Both are
answered before the servicer runs, so a refused call changes nothing, and
both are counted (railyard_api_denied_total), and logged and audited a few
at a time per caller (refusals.py).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import grpc

from controller.api.audit import AuditLog
from controller.api.refusals import Sampler, peer_address
from controller.metrics import Metrics
from controller.security.policy import Grant, Policy, fingerprint
from controller.security.tokens import Tokens

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Caller:
    identity: str
    grant: Grant


class CallerContext:
    """The servicer's context with the authorized caller attached
    (`context.caller`); everything else is the gRPC context's."""

    def __init__(self, context, caller: Caller) -> None:
        self._context = context
        self.caller = caller

    def __getattr__(self, name: str):
        return getattr(self._context, name)


def caller_of(context) -> Caller | None:
    """Who is calling, where the API runs with mutual TLS; None without it."""
    return getattr(context, "caller", None)


def peer_identity(context) -> str | None:
    """The common name of the client's certificate, which the TLS handshake
    verified against the CA; None without one."""
    names = context.auth_context().get("x509_common_name") or []
    return names[0].decode() if names else None


def peer_certificate(context) -> bytes | None:
    """The client's certificate (PEM) as the handshake verified it; None without one."""
    pems = context.auth_context().get("x509_pem_cert") or []
    return pems[0] if pems else None


@functools.lru_cache(maxsize=256)
def _fingerprint(pem: bytes) -> str:
    return fingerprint(pem)  # a handful of clients, each presenting one certificate: cached


def bearer_token(context) -> str | None:
    """The token of an `authorization: Bearer TOKEN` header (the scheme in
    any case, RFC 6750 and RFC 9110 11.1); None without one."""
    for key, value in context.invocation_metadata() or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


class Authorize(grpc.ServerInterceptor):
    def __init__(
        self, policy: Policy, metrics: Metrics, audit: AuditLog | None = None, tokens: Tokens | None = None
    ) -> None:
        self.policy = policy
        self.metrics = metrics
        self.audit = audit
        self.tokens = tokens
        self.sample = Sampler()

    def reload(self, policy: Policy, tokens: Tokens | None) -> None:
        """New rules for the calls that follow (SIGHUP); a call in flight, or a
        stream already authorized, keeps the answer it got."""
        self.policy, self.tokens = policy, tokens

    def _identify(self, context) -> tuple[str | None, str]:
        """Who is calling, or None and why not. A certificate wins: only the
        token listener lets a client in without one."""
        identity = peer_identity(context)
        if identity is not None:
            pem = peer_certificate(context)
            if pem is not None and self.policy.revoked and _fingerprint(pem) in self.policy.revoked:
                return None, f"the client certificate of {identity[:64]!r} is revoked (the policy's revoked list)"
            return identity, ""
        token = bearer_token(context)
        if token is None or self.tokens is None:
            return None, "no client identity: present a client certificate, or a bearer token on the token listener"
        identity = self.tokens.identity_of(token)
        return identity, "" if identity is not None else "the bearer token is not one the controller knows"

    def _authorize(self, method: str, context) -> Caller:
        """The caller, or an abort (UNAUTHENTICATED, PERMISSION_DENIED), counted and audited."""
        identity, why_not = self._identify(context)
        grant = self.policy.grant_of(identity) if identity is not None else None
        name = method.rsplit("/", 1)[-1]
        if identity is None:
            code, details = grpc.StatusCode.UNAUTHENTICATED, why_not
        elif grant is None:
            code, details = grpc.StatusCode.PERMISSION_DENIED, f"identity {identity[:64]!r} has no role in the policy"
        elif not self.policy.allows(grant.role, method):
            code = grpc.StatusCode.PERMISSION_DENIED
            details = f"role {grant.role} may not call {name} (identity {identity[:64]!r})"
        else:
            return Caller(identity, grant)
        self.metrics.api_denied.labels(name, code.name).inc()
        peer = peer_address(context)
        verdict = self.sample(identity or peer)
        if verdict.write:
            # Sampled per caller: a flood of refused calls costs its victim
            # a counter tick each, not a log and audit line each.
            more = f" (and {verdict.held_back} more refused since the last line)" if verdict.held_back else ""
            log.warning("denied %s from %s: %s%s", method, peer, details, more)
            if self.audit is not None:
                self.audit.record(
                    identity=identity,
                    role=grant.role if grant else None,
                    method=name,
                    code=code.name,
                    peer=peer,
                    held_back=verdict.held_back,
                )
        context.abort(code, details)
        raise AssertionError("unreachable: abort raises")

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method

        def guard(behavior):
            def check(request, context):
                caller = self._authorize(method, context)
                return behavior(request, CallerContext(context, caller))

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
