"""YAML -> Workload, strictly: an unknown key, a wrong type or a value out of
range is refused with its field named (`traffic[2].fan_in`), before anything
runs (the items: items.py; the events: events.py). The reference is
README.md's "Scenario format" section."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from controller.errors import NAME_RULE, valid_name
from controller.fabric.spec import shipped_specs, spec_path
from controller.te.engine import EngineConfig
from controller.yamldoc import parse_yaml, read_yaml
from emulation.workload.events import parse_events
from emulation.workload.items import ITEM_KINDS, MAX_DURATION_S, check_names, parse_item
from emulation.workload.model import Telemetry, Workload, WorkloadError
from emulation.workload.values import integer, kind_of, number, only

SCENARIOS_DIR = Path(__file__).parent.parent / "scenarios"

_TOP = {"name", "description", "fabric", "duration_s", "traffic", "events", "telemetry", "engine"}


def available() -> list[str]:
    return sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml"))


def spec_file(workload: Workload, override: str | None = None) -> str | None:
    """The spec a workload runs on: `override`, else its own `fabric`; a
    shipped spec's file name or a path (None: the default spec)."""
    name = override or workload.fabric
    if not name:
        return None
    return str(spec_path(name))  # a missing file is reported when it is read


def load_workload(name_or_path: str | Path) -> Workload:
    """A shipped scenario by name (a suite's as SUITE/NAME, e.g.
    hedera/stag0-0.2-0.3), or a YAML file."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml") and not path.exists():
        path = SCENARIOS_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise WorkloadError("name", f"no scenario {str(name_or_path)!r}", ", ".join(available()) + ", or a YAML path")
    return workload_from_dict(read_yaml(path, WorkloadError), default_name=path.stem)


def parse_workload(text: str, default_name: str = "workload") -> Workload:
    return workload_from_dict(parse_yaml(text, WorkloadError), default_name)


def workload_from_dict(doc: Any, default_name: str = "workload") -> Workload:
    if not isinstance(doc, Mapping):
        raise WorkloadError("<document>", f"must be a mapping, got {kind_of(doc)}", "name, duration_s, traffic, ...")
    only(doc, "", _TOP)
    name = doc.get("name", default_name)
    if not isinstance(name, str) or not valid_name(name):
        raise WorkloadError("name", f"got {name!r}", NAME_RULE)
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise WorkloadError("description", f"got {kind_of(description)}", "a string")
    duration = number(doc, "duration_s", lower=0.0, upper=MAX_DURATION_S, default=10.0)
    traffic = doc.get("traffic")
    if not isinstance(traffic, list) or not traffic:
        raise WorkloadError(
            "traffic", f"got {kind_of(traffic)}", "a non-empty list of items, each one of: " + ", ".join(ITEM_KINDS)
        )
    items = tuple(parse_item(value, f"traffic[{i}]", duration) for i, value in enumerate(traffic))
    check_names(items)
    return Workload(
        name=name,
        description=" ".join(description.split()),
        duration_s=duration,
        traffic=items,
        events=parse_events([] if doc.get("events") is None else doc["events"], duration),
        fabric=_fabric(doc.get("fabric")),
        telemetry=parse_telemetry(doc.get("telemetry", {})),
        engine=_engine(doc.get("engine", {})),
    )


def _fabric(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not spec_path(value).is_file():
        raise WorkloadError("fabric", f"no spec {value!r}", ", ".join(shipped_specs()) + ", or a spec path")
    return value


def parse_telemetry(value: Any) -> Telemetry:
    """A workload's `telemetry:` (the simulated agent), or a bench's flags for it: each field checked."""
    if not isinstance(value, Mapping):
        raise WorkloadError("telemetry", f"must be a mapping, got {kind_of(value)}", "interval_s, noise, latency_s")
    only(value, "telemetry.", {"interval_s", "noise", "latency_s"})
    d = Telemetry()
    return Telemetry(
        number(value, "interval_s", lower=0.0, upper=60.0, default=d.interval_s, prefix="telemetry."),
        number(value, "noise", lower=0.0, upper=0.9, default=d.noise, prefix="telemetry.", closed=True),
        number(value, "latency_s", lower=0.0, upper=60.0, default=d.latency_s, prefix="telemetry.", closed=True),
    )


def _engine(value: Any) -> EngineConfig:
    if not isinstance(value, Mapping):
        raise WorkloadError("engine", f"must be a mapping, got {kind_of(value)}", "EngineConfig fields")
    known = {f.name for f in fields(EngineConfig)}
    defaults = EngineConfig()
    overrides: dict[str, Any] = {}
    for key in value:
        if key not in known:
            raise WorkloadError(f"engine.{key}", "unknown key", ", ".join(sorted(known)))
        default = getattr(defaults, key)
        if isinstance(default, bool) or not isinstance(default, (int, float)):
            raise WorkloadError(f"engine.{key}", "cannot be set from a scenario")
        if isinstance(default, int):
            overrides[key] = integer(value, key, None, lower=0, prefix="engine.")
        else:
            overrides[key] = number(value, key, lower=0.0, upper=1e12, prefix="engine.", closed=True)
    return EngineConfig(**overrides)
