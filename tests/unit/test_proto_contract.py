"""The proto is the API's contract (docs/api-contract.md): every RPC says the
status codes it answers bad input with and whether and how to retry it, and
every field says what it means. Read from the compiled descriptors' source
info, so a comment in the wrong place does not count."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

from controller.api import codegen

CODES = {code.name for code in grpc.StatusCode} - {"OK"}
RETRY_WORDS = ("retry", "Retry", "Idempotent", "Read-only")


def _descriptors(tmp: Path) -> descriptor_pb2.FileDescriptorSet:
    out = tmp / "railyard.pb"
    args = [
        "protoc",
        f"-I{codegen.PROTO_DIR}",
        f"-I{Path(protoc.__file__).parent / '_proto'}",
        "--include_source_info",
        f"--descriptor_set_out={out}",
        *(str(p.relative_to(codegen.PROTO_DIR)) for p in codegen.proto_files()),
    ]
    assert protoc.main(args) == 0
    return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[tuple[descriptor_pb2.FileDescriptorProto, dict[tuple[int, ...], str]]]:
    found = []
    for file in _descriptors(tmp_path_factory.mktemp("proto")).file:
        comments = {
            tuple(loc.path): loc.leading_comments + loc.trailing_comments for loc in file.source_code_info.location
        }
        found.append((file, comments))
    return found


def test_every_rpc_says_its_codes_and_how_to_retry(files):
    rpcs = 0
    for file, comments in files:
        for s, service in enumerate(file.service):
            for m, method in enumerate(service.method):
                text = " ".join(comments.get((6, s, 2, m), "").split())
                rpcs += 1
                assert text.strip(), f"{service.name}.{method.name} has no comment"
                assert any(code in text for code in CODES) or "No errors of its own" in text, method.name
                assert any(word in text for word in RETRY_WORDS), f"{method.name}: idempotency and retry unsaid"
    assert rpcs == 19


def _fields(message: descriptor_pb2.DescriptorProto, path: tuple[int, ...], name: str):
    for f, field in enumerate(message.field):
        yield f"{name}.{field.name}", (*path, 2, f)
    for n, nested in enumerate(message.nested_type):
        yield from _fields(nested, (*path, 3, n), f"{name}.{nested.name}")


def test_every_field_says_what_it_means(files):
    bare = [
        f"{file.name}: {name}"
        for file, comments in files
        for m, message in enumerate(file.message_type)
        for name, path in _fields(message, (4, m), message.name)
        if not comments.get(path, "").strip()
    ]
    assert not bare, bare
