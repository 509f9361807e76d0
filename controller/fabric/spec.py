"""Fabric spec: the one YAML document both the controller and the emulation read.

Validation is strict and specific: every error names the key (dotted path),
the value it found and what is allowed, because a wrong spec silently turned
into a different fabric is the most expensive mistake an operator can make.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.errors import FieldError
from controller.fabric import addressing as ad
from controller.yamldoc import parse_yaml, read_yaml

SPECS_DIR = Path(__file__).parent / "specs"
DEFAULT_SPEC = SPECS_DIR / "default.yaml"

# Addressing packs rail, pod and server into 10.x.y.z with .254 reserved for
# the leaf gateway (see addressing.py); these bounds keep every address valid.
MAX_RAILS = ad.RAIL_LIMIT
MAX_PODS = 255  # per cluster: a spine's ports face pods x rails leaves
MAX_CLUSTERS = ad.POD_LIMIT // 256  # pods of every cluster stay under the address limit
MAX_SERVERS_PER_POD = 253
MAX_SPINES = 256  # per leaf: a leaf has one uplink per spine (of its plane)
MAX_CORES = 1024
MAX_FAT_TREE_K = 30  # k=30 gives (k/2)^2 = 225 hosts per pod, under the 253 limit


class SpecError(FieldError):
    """A fabric spec is invalid. `field` is the dotted key that is wrong."""

    context = "fabric spec"


class Kind(str, enum.Enum):
    RAIL_OPTIMIZED = "rail-optimized"
    RAIL_ONLY = "rail-only"
    FAT_TREE = "fat-tree"


class PlaneMode(str, enum.Enum):
    SHARED = "shared"  # one spine layer joins every leaf of every rail
    PER_RAIL = "per-rail"  # multi-plane: each rail has its own spine set


class NicArbitration(str, enum.Enum):
    """How one direction of an emulated access link serves its flows
    (docs/emulation.md, "A queue per flow at each end of an access link")."""

    FIFO = "fifo"  # one queue: TCP's windows share it as they will
    PER_FLOW = "per-flow"  # a queue per flow, served in turn, as a RoCE NIC serves its QPs


@dataclass(frozen=True)
class Rates:
    nic_gbps: float  # the real fabric's NIC rate, used for the model at scale
    emulated_nic_mbps: float  # what the emulation shapes a NIC link to


@dataclass(frozen=True)
class EmulationSettings:
    mtu: int = 9000
    queue_packets: int = 32  # egress buffer per port, in MTU-sized packets
    controller: str = "tcp:127.0.0.1:6653"
    # Pure ACKs (any packet under 128 bytes) leave each egress ahead of the
    # data queue, in an HTB class of their own (emulation/net/links.py).
    ack_priority: bool = False
    nic_arbitration: NicArbitration = NicArbitration.FIFO  # a NIC's egress
    # The leaf's egress into a NIC: per-flow stands in for DCQCN, which brings
    # a receiver's RoCE senders to even rates where TCP through one FIFO does not.
    receiver_arbitration: NicArbitration = NicArbitration.FIFO


@dataclass(frozen=True)
class CoreLayer:
    """A third tier: core switches joining the clusters' spines. Spine j of
    every cluster is in spine plane j; the plane's cores (switches / spines of
    them) each take one uplink from that spine of every cluster."""

    switches: int
    oversubscription: float  # a spine's downlink capacity / its uplink capacity


@dataclass(frozen=True)
class FabricSpec:
    name: str
    kind: Kind
    pods: int  # in the whole fabric (clusters x pods per cluster)
    servers_per_pod: int
    rails: int
    spines: int  # shared: spines (per cluster, with a core); per-rail: spines in each plane
    plane_mode: PlaneMode
    oversubscription: float  # leaf downlink capacity / leaf uplink capacity
    rates: Rates
    emulation: EmulationSettings = field(default_factory=EmulationSettings)
    k: int = 0  # fat-tree arity; 0 for the rail kinds
    clusters: int = 1
    core: CoreLayer | None = None  # set exactly when clusters > 1

    @property
    def pods_per_cluster(self) -> int:
        return self.pods // self.clusters

    def cluster_of(self, pod: int) -> int:
        return pod // self.pods_per_cluster


_COMMON_KEYS = {"name", "kind", "rates", "emulation"}
_KIND_KEYS = {
    Kind.RAIL_OPTIMIZED: {
        "pods",
        "servers_per_pod",
        "rails",
        "spines",
        "plane_mode",
        "oversubscription",
        "clusters",
        "core",
    },
    Kind.RAIL_ONLY: {"servers", "rails"},
    Kind.FAT_TREE: {"k"},
}
_KIND_REQUIRED = {
    Kind.RAIL_OPTIMIZED: {"pods", "servers_per_pod", "rails", "spines"},
    Kind.RAIL_ONLY: {"servers", "rails"},
    Kind.FAT_TREE: {"k"},
}


def shipped_specs() -> list[str]:
    return sorted(p.name for p in SPECS_DIR.glob("*.yaml"))


def spec_path(name: str | Path) -> Path:
    """A spec's file: `name` if it is one, else the shipped spec of that name
    (`rail-2k.yaml` or `rail-2k`), wherever the package is installed."""
    path = Path(name)
    if path.exists() or path.name != str(name):  # an existing file, or a path with a directory: as given
        return path
    for shipped in (SPECS_DIR / path.name, SPECS_DIR / f"{path.name}.yaml"):
        if shipped.is_file():
            return shipped
    return path


def load_spec(path: str | Path) -> FabricSpec:
    found = spec_path(path)
    if not found.exists() and found.name == str(path):  # a bare name that is neither a file here nor shipped
        raise SpecError(
            "<file>", f"no spec {str(path)!r}", "a YAML path, or a shipped spec: " + ", ".join(shipped_specs())
        )
    return spec_from_dict(read_yaml(found, SpecError))


def parse_spec(text: str) -> FabricSpec:
    return spec_from_dict(parse_yaml(text, SpecError))


def spec_from_dict(doc: Any) -> FabricSpec:
    if not isinstance(doc, Mapping):
        raise SpecError("<document>", f"must be a mapping, got {_type(doc)}")
    kind_value = doc.get("kind", Kind.RAIL_OPTIMIZED.value)
    try:
        kind = Kind(kind_value)
    except ValueError:
        raise SpecError("kind", f"got {kind_value!r}", ", ".join(k.value for k in Kind)) from None

    allowed = _COMMON_KEYS | _KIND_KEYS[kind]
    for key in doc:
        if key not in allowed:
            raise SpecError(str(key), f"unknown key for kind {kind.value}", ", ".join(sorted(allowed)))
    for key in sorted(_KIND_REQUIRED[kind]):
        if key not in doc:
            raise SpecError(key, f"missing (required for kind {kind.value})")

    name = doc.get("name", "railyard")
    if not isinstance(name, str) or not name or not name.replace("-", "").replace("_", "").isalnum() or len(name) > 32:
        raise SpecError("name", f"got {name!r}", "1-32 characters of letters, digits, '-' or '_'")

    rates = _rates(doc.get("rates"))
    emulation = _emulation(doc.get("emulation", {}))

    if kind is Kind.RAIL_OPTIMIZED:
        mode_value = doc.get("plane_mode", PlaneMode.SHARED.value)
        try:
            plane_mode = PlaneMode(mode_value)
        except ValueError:
            raise SpecError("plane_mode", f"got {mode_value!r}", ", ".join(m.value for m in PlaneMode)) from None
        pods = _int(doc, "pods", 1, MAX_PODS)
        spines = _int(doc, "spines", 1, MAX_SPINES)
        clusters, core = _clusters(doc, plane_mode, spines)
        return FabricSpec(
            name=name,
            kind=kind,
            pods=clusters * pods,
            servers_per_pod=_int(doc, "servers_per_pod", 1, MAX_SERVERS_PER_POD),
            rails=_int(doc, "rails", 1, MAX_RAILS),
            spines=spines,
            plane_mode=plane_mode,
            oversubscription=_number(doc, "oversubscription", 1.0, lower=0.0, upper=64.0, default=1.0),
            rates=rates,
            emulation=emulation,
            clusters=clusters,
            core=core,
        )
    if kind is Kind.RAIL_ONLY:
        return FabricSpec(
            name=name,
            kind=kind,
            pods=1,
            servers_per_pod=_int(doc, "servers", 1, MAX_SERVERS_PER_POD),
            rails=_int(doc, "rails", 1, MAX_RAILS),
            spines=0,
            plane_mode=PlaneMode.SHARED,
            oversubscription=1.0,
            rates=rates,
            emulation=emulation,
        )
    k = _int(doc, "k", 4, MAX_FAT_TREE_K)
    if k % 2:
        raise SpecError("k", f"got {k}", f"an even integer from 4 to {MAX_FAT_TREE_K}")
    return FabricSpec(
        name=name,
        kind=kind,
        pods=k,
        servers_per_pod=(k // 2) ** 2,
        rails=1,
        spines=(k // 2) ** 2,
        plane_mode=PlaneMode.SHARED,
        oversubscription=1.0,
        rates=rates,
        emulation=emulation,
        k=k,
    )


def _clusters(doc: Mapping[str, Any], plane_mode: PlaneMode, spines: int) -> tuple[int, CoreLayer | None]:
    """`clusters` and `core` come together: a third tier needs both."""
    if "clusters" not in doc and "core" not in doc:
        return 1, None
    clusters = _int(doc, "clusters", 2, MAX_CLUSTERS)
    value = doc.get("core")
    if value is None:
        raise SpecError("core", "missing (required with clusters)", "a mapping with switches and oversubscription")
    if not isinstance(value, Mapping):
        raise SpecError("core", f"must be a mapping, got {_type(value)}")
    _only(value, "core", {"switches", "oversubscription"})
    if plane_mode is not PlaneMode.SHARED:
        raise SpecError(
            "plane_mode", f"got {plane_mode.value!r} with clusters", "shared (a core joins each cluster's spine planes)"
        )
    switches = _int(value, "switches", 1, MAX_CORES, prefix="core.")
    if switches % spines:
        raise SpecError(
            "core.switches",
            f"got {switches} for {spines} spines per cluster",
            f"a multiple of spines ({spines}, {2 * spines}, ...): each spine plane has the same number of cores",
        )
    oversubscription = _number(value, "oversubscription", 7.0, lower=0.0, upper=64.0, prefix="core.", default=1.0)
    return clusters, CoreLayer(switches, oversubscription)


def _rates(value: Any) -> Rates:
    if value is None:
        raise SpecError("rates", "missing", "a mapping with nic_gbps and emulated_nic_mbps")
    if not isinstance(value, Mapping):
        raise SpecError("rates", f"must be a mapping, got {_type(value)}")
    _only(value, "rates", {"nic_gbps", "emulated_nic_mbps"})
    return Rates(
        nic_gbps=_number(value, "nic_gbps", 1.0, lower=0.0, upper=3200.0, prefix="rates."),
        emulated_nic_mbps=_number(value, "emulated_nic_mbps", 1.0, lower=0.0, upper=10000.0, prefix="rates."),
    )


def _emulation(value: Any) -> EmulationSettings:
    if not isinstance(value, Mapping):
        raise SpecError("emulation", f"must be a mapping, got {_type(value)}")
    _only(
        value,
        "emulation",
        {"mtu", "queue_packets", "controller", "ack_priority", "nic_arbitration", "receiver_arbitration"},
    )
    defaults = EmulationSettings()
    controller = value.get("controller", defaults.controller)
    if not isinstance(controller, str) or not _is_controller_target(controller):
        raise SpecError("emulation.controller", f"got {controller!r}", "tcp:HOST:PORT, e.g. tcp:127.0.0.1:6653")
    ack_priority = value.get("ack_priority", defaults.ack_priority)
    if not isinstance(ack_priority, bool):
        raise SpecError("emulation.ack_priority", f"got {ack_priority!r}", "true or false")
    return EmulationSettings(
        mtu=_int(value, "mtu", 1280, 9000, prefix="emulation.", default=defaults.mtu),
        queue_packets=_int(value, "queue_packets", 2, 10000, prefix="emulation.", default=defaults.queue_packets),
        controller=controller,
        ack_priority=ack_priority,
        nic_arbitration=_arbitration(value, "nic_arbitration"),
        receiver_arbitration=_arbitration(value, "receiver_arbitration"),
    )


def _arbitration(value: Mapping[str, Any], key: str) -> NicArbitration:
    arbitration = value.get(key, NicArbitration.FIFO.value)
    if not isinstance(arbitration, str) or arbitration not in {a.value for a in NicArbitration}:
        allowed = " or ".join(a.value for a in NicArbitration)
        raise SpecError(f"emulation.{key}", f"got {arbitration!r}", allowed)
    return NicArbitration(arbitration)


def _is_controller_target(text: str) -> bool:
    parts = text.split(":")
    return len(parts) == 3 and parts[0] == "tcp" and bool(parts[1]) and parts[2].isdigit() and 0 < int(parts[2]) < 65536


def _only(value: Mapping[str, Any], where: str, allowed: set[str]) -> None:
    for key in value:
        if key not in allowed:
            raise SpecError(f"{where}.{key}", "unknown key", ", ".join(sorted(allowed)))


def _int(
    doc: Mapping[str, Any], key: str, lower: int, upper: int, *, prefix: str = "", default: int | None = None
) -> int:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lower <= value <= upper:
        raise SpecError(prefix + key, f"got {value!r}", f"an integer from {lower} to {upper}")
    return value


def _number(
    doc: Mapping[str, Any],
    key: str,
    example: float,
    *,
    lower: float,
    upper: float,
    prefix: str = "",
    default: float | None = None,
) -> float:
    value = doc.get(key, default)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not lower < value <= upper:
        raise SpecError(prefix + key, f"got {value!r}", f"a number > {lower:g} and <= {upper:g} (e.g. {example:g})")
    return float(value)


def _type(value: Any) -> str:
    return type(value).__name__
