"""Pure fabric model: spec, builders, addressing. No I/O beyond reading a spec file."""

from pathlib import Path

from controller.fabric.addressing import NicId
from controller.fabric.builders import build_fabric
from controller.fabric.model import Endpoint, Fabric, FabricError, Link, Server, Switch, Tier
from controller.fabric.spec import DEFAULT_SPEC, FabricSpec, Kind, PlaneMode, SpecError, load_spec, parse_spec


def load_fabric(spec_path: str | Path | None = None) -> Fabric:
    """The fabric a spec file describes (the shipped demo spec when None)."""
    return build_fabric(load_spec(spec_path or DEFAULT_SPEC))


__all__ = [
    "DEFAULT_SPEC",
    "Endpoint",
    "Fabric",
    "FabricError",
    "FabricSpec",
    "Kind",
    "Link",
    "NicId",
    "PlaneMode",
    "Server",
    "SpecError",
    "Switch",
    "Tier",
    "build_fabric",
    "load_fabric",
    "load_spec",
    "parse_spec",
]
