"""Server reflection, as `grpc.reflection.v1` beside `v1alpha`.

grpcio-reflection serves only v1alpha; current clients (grpcurl, Postman,
buf curl) ask for v1 first. The two protocols are the same messages under
another package (grpc-proto's reflection/v1/reflection.proto differs from
v1alpha's only in its package and options), so v1 is served by the library's
own servicer, with v1alpha's messages on the wire, and its descriptor (the
v1alpha file renamed) is added to the pool so reflection can describe itself.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

V1ALPHA = reflection.SERVICE_NAME  # grpc.reflection.v1alpha.ServerReflection
V1_PACKAGE = "grpc.reflection.v1"
V1 = f"{V1_PACKAGE}.ServerReflection"
V1_FILE = "grpc/reflection/v1/reflection.proto"
METHOD = "ServerReflectionInfo"


def _v1_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """v1alpha's file descriptor, renamed to v1 (its options name v1alpha's
    Java and C# packages: dropped)."""
    v1 = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(v1)
    old, new = f".{v1.package}.", f".{V1_PACKAGE}."
    v1.name, v1.package = V1_FILE, V1_PACKAGE
    v1.ClearField("options")
    for message in v1.message_type:
        for field in message.field:
            if field.HasField("type_name"):  # a message field (setting it on a scalar, even to "", is invalid)
                field.type_name = field.type_name.replace(old, new)
    for method in v1.service[0].method:
        method.input_type = method.input_type.replace(old, new)
        method.output_type = method.output_type.replace(old, new)
    return v1


def enable(service_names: Iterable[str], server: grpc.Server) -> tuple[str, ...]:
    """Serves reflection, v1 and v1alpha, for `service_names` and itself; returns the names it lists."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(V1_FILE)
    except KeyError:  # the first server of this process
        pool.Add(_v1_descriptor())
    names = (*service_names, V1, V1ALPHA)
    servicer = reflection.ReflectionServicer(names, pool=pool)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(V1, {METHOD: handler}),))
    return names
