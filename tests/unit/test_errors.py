"""Every error Railyard raises on purpose descends from RailyardError and
names its gRPC status; the API answers with that status, and a bad field as
a google.rpc.BadRequest detail beside the trailer older clients read."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

import controller
import emulation
from controller.api.errors import FIELD_METADATA_KEY, MAX_DETAILS_CHARS, _trailers, status_of
from controller.errors import FieldError, NotFound, RailyardError, RateLimited, Status
from controller.intent.model import IntentError

# The lead's modules (emulation/model, emulation/simulate): to join the root there.
NOT_YET: set[str] = set()


def _exception_classes() -> dict[str, type[BaseException]]:
    found = {}
    for package in (controller, emulation):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if ".gen." in info.name or info.name.endswith((".gen", ".cli", ".__main__")):
                continue
            module = importlib.import_module(info.name)
            for name, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, BaseException) and cls.__module__ == module.__name__:
                    found[f"{module.__name__}.{name}"] = cls
    return found


def test_every_project_exception_has_the_one_root():
    classes = _exception_classes()
    assert len(classes) >= 45
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, RailyardError))
    assert sorted(name.rsplit(".", 1)[1] for name in outside) == sorted(NOT_YET), outside


def test_no_project_exception_is_also_a_builtin_one():
    # `except ValueError` or `except KeyError` must not catch Railyard's errors by accident.
    for name, cls in _exception_classes().items():
        if issubclass(cls, RailyardError):
            builtins = {c for c in cls.__mro__ if c.__module__ == "builtins"}
            assert builtins == {Exception, BaseException, object}, name


def test_every_status_is_a_grpc_status_code():
    for status in Status:
        assert grpc.StatusCode[status.name].value[0] == status.value


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (IntentError("pin.name", "bad"), grpc.StatusCode.INVALID_ARGUMENT),
        (NotFound("no job 'x'"), grpc.StatusCode.NOT_FOUND),
        (RailyardError("a bug"), grpc.StatusCode.INTERNAL),
        (KeyError("not ours"), grpc.StatusCode.INTERNAL),
    ],
)
def test_the_status_is_the_errors_own(exc, code):
    assert status_of(exc) is code


def test_a_field_error_carries_a_bad_request_beside_the_old_trailer():
    exc = FieldError("pin.match.src_address", "'banana' is not an address", "10.<rail>.<pod>.<server+1>")
    trailers = dict(_trailers(exc, grpc.StatusCode.INVALID_ARGUMENT, str(exc)))
    assert trailers[FIELD_METADATA_KEY] == "pin.match.src_address"
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert (status.code, status.message) == (grpc.StatusCode.INVALID_ARGUMENT.value[0], str(exc))
    bad = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad)
    (violation,) = bad.field_violations
    assert violation.field == "pin.match.src_address"
    assert violation.description == "'banana' is not an address; allowed: 10.<rail>.<pod>.<server+1>"
    assert rpc_status.to_status(status).code is grpc.StatusCode.INVALID_ARGUMENT


def test_a_rate_limit_carries_retry_info_and_grpcs_pushback():
    exc = RateLimited("over 50 mutations per second", retry_after_s=0.25)
    trailers = dict(_trailers(exc, grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)))
    assert trailers["grpc-retry-pushback-ms"] == "251"
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    retry = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(retry)
    assert retry.retry_delay.ToNanoseconds() == 250_000_000


def test_an_error_without_details_sends_no_status_proto():
    assert _trailers(NotFound("no pin 'p'"), grpc.StatusCode.NOT_FOUND, "no pin 'p'") == ()


def test_a_long_allowed_list_is_cut_like_the_message():
    # Trailers are bounded: a fabric's every spine name must not make the status too large to send.
    exc = FieldError("spine", "'x' is not on an equal-cost path", ", ".join(f"rys{i}" for i in range(5000)))
    trailers = dict(_trailers(exc, grpc.StatusCode.INVALID_ARGUMENT, "message"))
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    bad = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad)
    assert len(bad.field_violations[0].description) <= MAX_DETAILS_CHARS + len("... (truncated)")
