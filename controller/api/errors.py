"""Domain exceptions -> gRPC status codes, and per-RPC metrics. Nothing leaves as UNKNOWN."""

from __future__ import annotations

import functools
import inspect
import logging
import time

import grpc

from controller.api.audit import SELF_AUDITED, is_mutation
from controller.api.client import LEADER_METADATA_KEY
from controller.errors import (
    AlreadyExists,
    Conflict,
    FieldError,
    NotFound,
    NotLeader,
    PermissionDenied,
    RateLimited,
    RevisionGone,
)
from controller.intent.etcd_store import StoreConflict, StoreRefused, StoreUnavailable
from controller.intent.store import StoreError
from controller.te.placement import NoCapacity
from controller.telemetry.ingest import Overloaded

log = logging.getLogger(__name__)

FIELD_METADATA_KEY = "railyard-field"

_CODES = (
    (FieldError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotLeader, grpc.StatusCode.FAILED_PRECONDITION),
    (StoreConflict, grpc.StatusCode.ABORTED),
    (StoreUnavailable, grpc.StatusCode.UNAVAILABLE),
    (StoreRefused, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (Conflict, grpc.StatusCode.FAILED_PRECONDITION),
    (NoCapacity, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Overloaded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (RevisionGone, grpc.StatusCode.OUT_OF_RANGE),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (RateLimited, grpc.StatusCode.RESOURCE_EXHAUSTED),
    # Any other store trouble (a value in it that does not read): retry once it is repaired.
    (StoreError, grpc.StatusCode.UNAVAILABLE),
)
DOMAIN_ERRORS = tuple(cls for cls, _ in _CODES)


def status_of(exc: BaseException) -> grpc.StatusCode:
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


MAX_DETAILS_CHARS = 2000  # a status message travels in trailers, whose size is bounded


def _details(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= MAX_DETAILS_CHARS else text[:MAX_DETAILS_CHARS] + "... (truncated)"


def _abort(context, method: str, exc: BaseException) -> None:
    if not context.is_active():
        # The client went away (cancelled, or its deadline passed) mid-call:
        # routine for telemetry agents, not an internal error. Nothing to answer.
        log.debug("%s: the client went away (%s)", method, type(exc).__name__)
        return
    if isinstance(exc, DOMAIN_ERRORS):
        if isinstance(exc, FieldError):
            context.set_trailing_metadata(((FIELD_METADATA_KEY, exc.field[:200]),))
        if isinstance(exc, NotLeader):
            context.set_trailing_metadata(((LEADER_METADATA_KEY, exc.leader),))
        if isinstance(exc, RateLimited):  # gRPC's own retry hint, which its retry policies honour
            context.set_trailing_metadata((("grpc-retry-pushback-ms", str(int(exc.retry_after_s * 1000) + 1)),))
        context.abort(status_of(exc), _details(exc))
    if context.code() is not None:
        raise exc  # the servicer aborted with its own status
    log.error("%s failed", method, exc_info=exc)
    context.abort(grpc.StatusCode.INTERNAL, f"internal error in {method}: {type(exc).__name__}")


def _record(servicer, method: str, context, started: float, request=None) -> None:
    metrics = getattr(servicer, "metrics", None)
    if metrics is None:
        return
    code = context.code() or (grpc.StatusCode.OK if context.is_active() else grpc.StatusCode.CANCELLED)
    metrics.api_requests.labels(method, code.name).inc()
    metrics.api_latency.labels(method).observe(time.perf_counter() - started)
    denied = code is grpc.StatusCode.PERMISSION_DENIED  # by the servicer (an agent's switches)
    if denied:
        metrics.api_denied.labels(method, code.name).inc()
    audit = getattr(servicer, "audit", None)
    if audit is not None and (is_mutation(method) or denied) and method not in SELF_AUDITED:
        caller = getattr(context, "caller", None)  # auth.CallerContext, under mutual TLS
        audit.record(
            identity=caller.identity if caller else None,
            role=caller.grant.role if caller else None,
            method=method,
            code=code.name,
            request=request,
        )


def _limit(servicer, method: str, context) -> None:
    """A caller's mutations are rate-limited (limits.MutationLimiter), keyed
    by its certificate identity, or by its address in the clear."""
    limiter = getattr(servicer, "limiter", None)
    if limiter is not None and is_mutation(method):
        caller = getattr(context, "caller", None)
        limiter.admit(caller.identity if caller else context.peer().rsplit(":", 1)[0], method)


def _check_deadline(context) -> None:
    remaining = context.time_remaining()
    if remaining is not None and remaining <= 0:
        context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed before the request was handled")


def rpc(method):
    """Wraps a unary (or client-streaming) servicer method. A servicer with a
    `priority` (telemetry/priority.py) runs each call ahead of background work."""

    @functools.wraps(method)
    def wrapper(self, request, context):
        started = time.perf_counter()
        try:
            _check_deadline(context)
            _limit(self, method.__name__, context)
            priority = getattr(self, "priority", None)
            if priority is None:
                return method(self, request, context)
            with priority.call():
                return method(self, request, context)
        except Exception as exc:
            if isinstance(exc, RateLimited):
                self.metrics.api_rate_limited.labels(method.__name__).inc()
            _abort(context, method.__name__, exc)
        finally:
            _record(self, method.__name__, context, started, request)

    return wrapper


def stream_guard(method):
    """The same for server-streaming methods (generators)."""
    assert inspect.isgeneratorfunction(method)

    @functools.wraps(method)
    def wrapper(self, request, context):
        started = time.perf_counter()
        try:
            _check_deadline(context)
            yield from method(self, request, context)
        except Exception as exc:
            _abort(context, method.__name__, exc)
        finally:
            _record(self, method.__name__, context, started)

    return wrapper
