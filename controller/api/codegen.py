"""Generates the protobuf/gRPC Python modules from proto/ (`make proto`).

grpc_tools writes absolute imports (`from railyard.v1 import x_pb2`); they are
rewritten to live under controller.api.gen so no top-level `railyard`
package is needed. A unit test regenerates into a temp dir and compares, so
committed code never drifts from the .proto files.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto"
GEN_DIR = Path(__file__).resolve().parent / "gen"
PACKAGE = "controller.api.gen"


def proto_files() -> list[Path]:
    return sorted(PROTO_DIR.rglob("*.proto"))


def generate(out: Path) -> None:
    with tempfile.TemporaryDirectory() as raw:
        args = [
            "protoc",
            f"-I{PROTO_DIR}",
            f"-I{Path(protoc.__file__).parent / '_proto'}",
            f"--python_out={raw}",
            f"--pyi_out={raw}",
            f"--grpc_python_out={raw}",
            *(str(p.relative_to(PROTO_DIR)) for p in proto_files()),
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        for path in sorted(Path(raw).rglob("*")):
            if path.is_file():
                target = out / path.relative_to(raw)
                target.parent.mkdir(parents=True, exist_ok=True)
                text = re.sub(
                    r"^from (railyard\.\S+) import", rf"from {PACKAGE}.\1 import", path.read_text(), flags=re.M
                )
                target.write_text(text)
    for directory in [out, *(d for d in out.rglob("*") if d.is_dir())]:
        (directory / "__init__.py").touch()


def generated_files(root: Path) -> dict[str, str]:
    """The generated sources under `root` (not the bytecode Python caches beside them)."""
    return {
        str(p.relative_to(root)): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.suffix in (".py", ".pyi") and "__pycache__" not in p.parts and p.is_file()
    }


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else GEN_DIR)
