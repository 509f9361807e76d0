"""Server reflection on the real daemon, over a real gRPC channel: v1 (what
current clients ask first) and v1alpha (what older ones ask) both list
Railyard's services and describe them from the daemon's own descriptors."""

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2

from tests.integration.helpers import api_daemon

RAILYARD_SERVICES = {"railyard.v1.FabricService", "railyard.v1.PlacementService", "railyard.v1.TelemetryService"}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    with api_daemon(tmp_path_factory.mktemp("reflection")) as ctl:
        yield ctl


def ask(daemon, version: str, *requests: reflection_pb2.ServerReflectionRequest):
    with grpc.insecure_channel(f"127.0.0.1:{daemon.ports.grpc}") as channel:
        call = channel.stream_stream(
            f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        return list(call(iter(requests), timeout=10))


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_reflection_lists_and_describes_the_services(daemon, version):
    listed, described = ask(
        daemon,
        version,
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="railyard.v1.PlacementService"),
    )
    names = {s.name for s in listed.list_services_response.service}
    assert names >= RAILYARD_SERVICES | {"grpc.reflection.v1.ServerReflection", "grpc.health.v1.Health"}
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(b)
        for b in described.file_descriptor_response.file_descriptor_proto
    ]
    placement = next(f for f in files if f.name == "railyard/v1/placement.proto")
    assert "PlaceJob" in {m.name for m in placement.service[0].method}
    assert placement.options.go_package.endswith(";railyardv1")


def test_v1_reflection_describes_itself_and_refuses_an_unknown_symbol(daemon):
    itself, unknown = ask(
        daemon,
        "v1",
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="grpc.reflection.v1.ServerReflection"),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="railyard.v1.NoSuchService"),
    )
    (raw,) = itself.file_descriptor_response.file_descriptor_proto
    file = descriptor_pb2.FileDescriptorProto.FromString(raw)
    assert (file.package, file.service[0].method[0].input_type) == (
        "grpc.reflection.v1",
        ".grpc.reflection.v1.ServerReflectionRequest",
    )
    assert unknown.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
