"""Domain exceptions -> gRPC status codes, and per-RPC metrics. Nothing leaves as UNKNOWN.

Each RailyardError names its own status (controller/errors.py). The details
travel twice where a client may look: a bad field as a google.rpc.BadRequest
(AIP-193) and in the railyard-field trailer older clients read; a rate limit
as a google.rpc.RetryInfo and as gRPC's own retry pushback.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from controller.api.audit import SELF_AUDITED, is_mutation
from controller.api.client import LEADER_METADATA_KEY
from controller.errors import FieldError, NotLeader, RailyardError, RateLimited, Status

log = logging.getLogger(__name__)

FIELD_METADATA_KEY = "railyard-field"  # the offending field, for clients older than the BadRequest detail
FIELD_CHARS = 200  # of a field path, in a trailer


def status_of(exc: BaseException) -> grpc.StatusCode:
    """A RailyardError's own status; INTERNAL for anything else."""
    if isinstance(exc, RailyardError):
        return grpc.StatusCode[exc.status.name]
    return grpc.StatusCode.INTERNAL


MAX_DETAILS_CHARS = 2000  # a status message travels in trailers, whose size is bounded


def _cut(text: str) -> str:
    return text if len(text) <= MAX_DETAILS_CHARS else text[:MAX_DETAILS_CHARS] + "... (truncated)"


def _details(exc: BaseException) -> str:
    return _cut(str(exc))


def _rich_details(exc: RailyardError) -> list[Message]:
    """The standard error details (google/rpc/error_details.proto) that say what `exc` says."""
    if isinstance(exc, FieldError):
        description = _cut(f"{exc.problem}; allowed: {exc.allowed}" if exc.allowed else exc.problem)
        violation = error_details_pb2.BadRequest.FieldViolation(field=exc.field[:FIELD_CHARS], description=description)
        return [error_details_pb2.BadRequest(field_violations=[violation])]
    if isinstance(exc, RateLimited):
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(int(exc.retry_after_s * 1e9))
        return [error_details_pb2.RetryInfo(retry_delay=delay)]
    return []


def _trailers(exc: RailyardError, code: grpc.StatusCode, details: str) -> tuple[tuple[str, str | bytes], ...]:
    """Every trailer `exc` answers with: one call sets them all (each call replaces the last)."""
    trailers: list[tuple[str, str | bytes]] = []
    if isinstance(exc, FieldError):
        trailers.append((FIELD_METADATA_KEY, exc.field[:FIELD_CHARS]))
    if isinstance(exc, NotLeader):
        trailers.append((LEADER_METADATA_KEY, exc.leader))
    if isinstance(exc, RateLimited):  # gRPC's own retry hint, which its retry policies honour
        trailers.append(("grpc-retry-pushback-ms", str(int(exc.retry_after_s * 1000) + 1)))
    rich = _rich_details(exc)
    if rich:
        packed = []
        for message in rich:
            packed.append(any_pb2.Any())
            packed[-1].Pack(message)
        status = status_pb2.Status(code=code.value[0], message=details, details=packed)
        trailers.extend(rpc_status.to_status(status).trailing_metadata)
    return tuple(trailers)


def _abort(context, method: str, exc: BaseException) -> None:
    if not context.is_active():
        # The client went away (cancelled, or its deadline passed) mid-call:
        # routine for telemetry agents, not an internal error. Nothing to answer.
        log.debug("%s: the client went away (%s)", method, type(exc).__name__)
        return
    if isinstance(exc, RailyardError) and exc.status is not Status.INTERNAL:
        code, details = status_of(exc), _details(exc)
        context.set_trailing_metadata(_trailers(exc, code, details))
        context.abort(code, details)
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
