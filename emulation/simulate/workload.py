"""Workloads for the simulator: YAML, validated on load, the field named in every error.

    name: job-mix
    description: what it shows
    duration_s: 20                # simulated seconds (the CLI's --duration overrides)
    traffic:
      pattern: jobs               # permutation | incast | jobs
      protocol: tcp               # tcp (elastic) | udp (sends at rate_gbps)
      rate_gbps: 400              # udp only; default: the NIC rate
      fan_in: 8                   # incast: senders into one NIC
      bystander: false            # incast: one more elephant into the NIC beside the receiver
      start_s: 0                  # incast: when the senders start (the bystander starts at 0)
      fill: 0.9                   # jobs: place jobs until this share of the GPUs is taken
      sizes: {8: 2, 64: 1}        # jobs: GPUs per job -> weight (or a list: equal weights)
      collectives: {ring: 2, tree: 1, all-to-all: 1}   # jobs: collective -> weight
      all_to_all_max_gpus: 64     # jobs: a larger all-to-all draw runs as a ring instead
      flow_gbps: 100              # jobs: per-flow demand the scheduler states (placement predicts with it)
    telemetry:
      interval_s: 0.2             # a TE cycle per sample
      noise: 0.3                  # each sample times a uniform factor in [1 - noise, 1 + noise]
      latency_s: 0.05             # from a decision to its entries in the switches
    engine:                       # optional EngineConfig overrides, e.g. max_moves_per_cycle: 4
    events:
      - {at_s: 4, link_down: ryl0r0:17}

Pure: text in, a frozen Workload out (`load_workload` reads the file first).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from controller.errors import FieldError
from controller.te.engine import EngineConfig
from controller.te.jobs import Pattern

WORKLOADS_DIR = Path(__file__).parent / "workloads"
PATTERNS = ("permutation", "incast", "jobs")
PROTOCOLS = ("tcp", "udp")
MAX_DURATION_S = 3600.0


class WorkloadError(FieldError):
    context = "workload"


@dataclass(frozen=True)
class LinkDown:
    at_s: float
    link: str  # "switch:port", either end; checked against the fabric when flows are built


@dataclass(frozen=True)
class JobMix:
    fill: float = 0.9
    sizes: tuple[tuple[int, float], ...] = ((8, 1.0), (16, 1.0), (64, 1.0), (256, 1.0))
    collectives: tuple[tuple[Pattern, float], ...] = (
        (Pattern.RING, 2.0),
        (Pattern.TREE, 1.0),
        (Pattern.ALL_TO_ALL, 1.0),
    )
    all_to_all_max_gpus: int = 64
    flow_gbps: float = 100.0


@dataclass(frozen=True)
class Telemetry:
    interval_s: float = 0.2
    noise: float = 0.3
    latency_s: float = 0.05


@dataclass(frozen=True)
class Workload:
    name: str
    description: str = ""
    duration_s: float = 10.0
    pattern: str = "permutation"
    protocol: str = "tcp"
    rate_gbps: float | None = None  # udp; None: the NIC rate
    fan_in: int = 8
    bystander: bool = False
    start_s: float = 0.0
    jobs: JobMix = field(default_factory=JobMix)
    telemetry: Telemetry = field(default_factory=Telemetry)
    engine: EngineConfig = field(default_factory=EngineConfig)
    events: tuple[LinkDown, ...] = ()


def available() -> list[str]:
    return sorted(p.stem for p in WORKLOADS_DIR.glob("*.yaml"))


def load_workload(name_or_path: str | Path) -> Workload:
    """A shipped workload by name, or a YAML file."""
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = WORKLOADS_DIR / f"{name_or_path}.yaml"
    try:
        text = path.read_text()
    except OSError as exc:
        raise WorkloadError(
            "<file>", f"cannot read {path}: {exc.strerror}", ", ".join(available()) + ", or a YAML path"
        ) from None
    return parse_workload(text, default_name=path.stem)


def parse_workload(text: str, default_name: str = "workload") -> Workload:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WorkloadError("<document>", f"not valid YAML: {exc}") from None
    return workload_from_dict(doc, default_name)


_TOP = {"name", "description", "duration_s", "traffic", "telemetry", "engine", "events"}
_TRAFFIC = {"pattern", "protocol", "rate_gbps", "fan_in", "bystander", "start_s"}
_JOBS = {"fill", "sizes", "collectives", "all_to_all_max_gpus", "flow_gbps"}
_ONLY_FOR = {"fan_in": "incast", "bystander": "incast", "start_s": "incast", **dict.fromkeys(_JOBS, "jobs")}


def workload_from_dict(doc: Any, default_name: str = "workload") -> Workload:
    if not isinstance(doc, Mapping):
        raise WorkloadError("<document>", f"must be a mapping, got {_type(doc)}", "name, duration_s, traffic, ...")
    _only(doc, "", _TOP)
    name = doc.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise WorkloadError("name", f"got {name!r}", "a non-empty string")
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise WorkloadError("description", f"got {_type(description)}", "a string")
    duration = _number(doc, "duration_s", lower=0.0, upper=MAX_DURATION_S, default=10.0)

    traffic = doc.get("traffic")
    if not isinstance(traffic, Mapping):
        raise WorkloadError("traffic", "missing or not a mapping", "a mapping with pattern (and protocol, ...)")
    _only(traffic, "traffic.", _TRAFFIC | _JOBS)
    pattern = traffic.get("pattern")
    if pattern not in PATTERNS:
        raise WorkloadError("traffic.pattern", f"got {pattern!r}", ", ".join(PATTERNS))
    for key in traffic:
        wanted = _ONLY_FOR.get(key)
        if wanted and wanted != pattern:
            raise WorkloadError(f"traffic.{key}", f"only applies to pattern {wanted}, not {pattern}")
    protocol = traffic.get("protocol", "tcp")
    if protocol not in PROTOCOLS:
        raise WorkloadError("traffic.protocol", f"got {protocol!r}", ", ".join(PROTOCOLS))
    rate = None
    if "rate_gbps" in traffic:
        if protocol != "udp":
            raise WorkloadError("traffic.rate_gbps", "only applies to protocol udp (tcp is elastic)")
        rate = _number(traffic, "rate_gbps", lower=0.0, upper=3200.0, prefix="traffic.")
    fan_in = traffic.get("fan_in", 8)
    if isinstance(fan_in, bool) or not isinstance(fan_in, int) or fan_in < 2:
        raise WorkloadError("traffic.fan_in", f"got {fan_in!r}", "an integer >= 2")
    bystander = traffic.get("bystander", False)
    if not isinstance(bystander, bool):
        raise WorkloadError("traffic.bystander", f"got {bystander!r}", "true or false")
    start = _number(traffic, "start_s", lower=0.0, upper=duration, default=0.0, prefix="traffic.", closed=True)

    return Workload(
        name=name,
        description=description,
        duration_s=duration,
        pattern=pattern,
        protocol=protocol,
        rate_gbps=rate,
        fan_in=fan_in,
        bystander=bystander,
        start_s=start,
        jobs=_jobs(traffic),
        telemetry=_telemetry(doc.get("telemetry", {})),
        engine=_engine(doc.get("engine", {})),
        events=_events(doc.get("events") or [], duration),
    )


def _jobs(traffic: Mapping) -> JobMix:
    defaults = JobMix()
    fill = _number(traffic, "fill", lower=0.0, upper=1.0, default=defaults.fill, prefix="traffic.")
    sizes = _weights(traffic, "sizes", defaults.sizes, _size)
    collectives = _weights(traffic, "collectives", defaults.collectives, _collective)
    a2a = traffic.get("all_to_all_max_gpus", defaults.all_to_all_max_gpus)
    if isinstance(a2a, bool) or not isinstance(a2a, int) or a2a < 1:
        raise WorkloadError("traffic.all_to_all_max_gpus", f"got {a2a!r}", "an integer >= 1")
    flow = _number(
        traffic, "flow_gbps", lower=0.0, upper=3200.0, default=defaults.flow_gbps, prefix="traffic.", closed=True
    )
    return JobMix(fill, sizes, collectives, a2a, flow)


def _size(value: Any, where: str) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(where, f"got {value!r}", "a GPU count >= 1")
    return value


def _collective(value: Any, where: str) -> Pattern:
    try:
        return Pattern(value)
    except ValueError:
        raise WorkloadError(where, f"got {value!r}", ", ".join(p.value for p in Pattern)) from None


def _weights(traffic: Mapping, key: str, default: tuple, item) -> tuple:
    where = f"traffic.{key}"
    value = traffic.get(key)
    if value is None:
        return default
    if isinstance(value, list):
        value = dict.fromkeys(value, 1.0)
    if not isinstance(value, Mapping) or not value:
        raise WorkloadError(where, f"got {value!r}", "a non-empty mapping of value -> weight, or a list")
    out = []
    for k, weight in value.items():
        name = item(k, f"{where}.{k}")
        ok = isinstance(weight, (int, float)) and not isinstance(weight, bool) and math.isfinite(weight)
        if not ok or weight <= 0:
            raise WorkloadError(f"{where}.{k}", f"weight {weight!r}", "a number > 0")
        out.append((name, float(weight)))
    return tuple(out)


def _telemetry(value: Any) -> Telemetry:
    if not isinstance(value, Mapping):
        raise WorkloadError("telemetry", f"must be a mapping, got {_type(value)}", "interval_s, noise, latency_s")
    _only(value, "telemetry.", {"interval_s", "noise", "latency_s"})
    d = Telemetry()
    interval = _number(value, "interval_s", lower=0.0, upper=60.0, default=d.interval_s, prefix="telemetry.")
    noise = _number(value, "noise", lower=0.0, upper=0.9, default=d.noise, prefix="telemetry.", closed=True)
    latency = _number(value, "latency_s", lower=0.0, upper=60.0, default=d.latency_s, prefix="telemetry.", closed=True)
    return Telemetry(interval, noise, latency)


def _engine(value: Any) -> EngineConfig:
    if not isinstance(value, Mapping):
        raise WorkloadError("engine", f"must be a mapping, got {_type(value)}", "EngineConfig fields")
    known = {f.name: f for f in fields(EngineConfig)}
    defaults = EngineConfig()
    overrides: dict[str, Any] = {}
    for key, v in value.items():
        if key not in known:
            raise WorkloadError(f"engine.{key}", "unknown key", ", ".join(sorted(known)))
        default = getattr(defaults, key)
        if isinstance(default, bool) or not isinstance(default, (int, float)):
            raise WorkloadError(f"engine.{key}", "cannot be set from a workload")
        if isinstance(default, int):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise WorkloadError(f"engine.{key}", f"got {v!r}", "an integer >= 0")
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise WorkloadError(f"engine.{key}", f"got {v!r}", "a number >= 0")
        overrides[key] = type(default)(v)
    return EngineConfig(**overrides)


def _events(value: Any, duration: float) -> tuple[LinkDown, ...]:
    if not isinstance(value, list):
        raise WorkloadError(
            "events", f"must be a list, got {_type(value)}", "[{at_s: SECONDS, link_down: SWITCH:PORT}]"
        )
    out = []
    for i, event in enumerate(value):
        where = f"events[{i}]"
        if not isinstance(event, Mapping) or set(event) != {"at_s", "link_down"}:
            raise WorkloadError(where, f"got {event!r}", "{at_s: SECONDS, link_down: SWITCH:PORT}")
        at = event["at_s"]
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not 0 < at < duration:
            raise WorkloadError(
                f"{where}.at_s", f"got {at!r}", f"more than 0 and less than {duration:g} (inside the run)"
            )
        link = event["link_down"]
        if not isinstance(link, str) or ":" not in link:
            raise WorkloadError(f"{where}.link_down", f"got {link!r}", "SWITCH:PORT, e.g. ryl0r0:3")
        out.append(LinkDown(float(at), link))
    return tuple(sorted(out, key=lambda e: e.at_s))


def _only(value: Mapping, prefix: str, allowed: set[str]) -> None:
    for key in value:
        if key not in allowed:
            raise WorkloadError(f"{prefix}{key}", "unknown key", ", ".join(sorted(allowed)))


def _number(
    doc: Mapping,
    key: str,
    *,
    lower: float,
    upper: float,
    default: float | None = None,
    prefix: str = "",
    closed: bool = False,
) -> float:
    value = doc.get(key, default)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    inside = ok and (lower <= value if closed else lower < value) and value <= upper
    if not inside:
        bound = ">=" if closed else ">"
        raise WorkloadError(prefix + key, f"got {value!r}", f"a number {bound} {lower:g} and <= {upper:g}")
    return float(value)


def _type(value: Any) -> str:
    return type(value).__name__
