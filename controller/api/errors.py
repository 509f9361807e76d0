"""Domain exceptions -> gRPC status codes. Nothing leaves as UNKNOWN."""

from __future__ import annotations

import functools
import logging

import grpc

from controller.errors import Conflict, FieldError, NotFound

log = logging.getLogger(__name__)

FIELD_METADATA_KEY = "railyard-field"


def status_of(exc: BaseException) -> grpc.StatusCode:
    if isinstance(exc, FieldError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(exc, NotFound):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(exc, Conflict):
        return grpc.StatusCode.FAILED_PRECONDITION
    return grpc.StatusCode.INTERNAL


def rpc(method):
    """Wraps a unary servicer method: domain errors become their status code
    (with the offending field in trailing metadata), anything else INTERNAL."""

    @functools.wraps(method)
    def wrapper(self, request, context):
        try:
            return method(self, request, context)
        except (FieldError, NotFound, Conflict) as exc:
            if isinstance(exc, FieldError):
                context.set_trailing_metadata(((FIELD_METADATA_KEY, exc.field),))
            context.abort(status_of(exc), str(exc))
        except Exception as exc:  # noqa: BLE001 - the one place that maps the unexpected
            if context.code() is not None:
                raise  # the servicer aborted with its own status
            log.exception("%s failed", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"internal error in {method.__name__}: {type(exc).__name__}")

    return wrapper
