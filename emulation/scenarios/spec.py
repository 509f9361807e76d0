"""Scenarios as data: YAML in emulation/scenarios/, validated like fabric specs.

A scenario says what traffic to run and what happens during the run; which
flows exist is decided here from the fabric and the seed, never told to the
controller (it learns them from telemetry).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from controller.errors import FieldError
from controller.fabric import FabricSpec, Kind, PlaneMode
from controller.fabric import addressing as ad
from controller.fabric.spec import SPECS_DIR

SCENARIOS_DIR = Path(__file__).parent
PATTERNS = ("permutation", "incast", "job")
PROTOCOLS = ("tcp", "udp")


class ScenarioError(FieldError):
    context = "scenario"


@dataclass(frozen=True)
class LinkDown:
    """An uplink goes down (both directions), named by its lower end: a leaf
    (or a fat tree's edge or aggregation switch) and the switch above it.
    Written as "leaf:port" or as {leaf, spine}; `check_events` fills in the
    other half from the fabric spec, and refuses anything that is not an uplink."""

    at_s: float
    leaf: str
    port: int | None = None  # the leaf's port facing `spine`
    spine: str = ""

    @property
    def link(self) -> str:
        """The link as "switch:port": how the fabric, drains and the optimum name it."""
        if self.port is None:
            raise ValueError(f"link-down {self.leaf} -> {self.spine}: not checked against a fabric spec yet")
        return f"{self.leaf}:{self.port}"


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    duration_s: float
    pattern: str
    protocol: str
    fan_in: int = 3
    bystander: bool = False
    collective: str = "ring"
    events: tuple[LinkDown, ...] = ()
    incast_start_s: float = 0.0  # the senders start this late: the bystander is already running
    fabric: str | None = None  # the spec it runs on unless one is given: a file in the shipped specs, or a path

    def spec_path(self, override: str | None = None) -> str | None:
        """The spec to run on: `override`, else the scenario's own; either a
        shipped spec's file name or a path (None: the default spec)."""
        name = override or self.fabric
        if not name:
            return None
        return str(_spec_file(name) or name)  # a missing file is reported when it is read


def _spec_file(name: str) -> Path | None:
    """A shipped spec by file name, else a path; None if neither exists."""
    for path in (SPECS_DIR / name, Path(name)):
        if path.exists():
            return path
    return None


def available() -> list[str]:
    return sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml"))


def load_scenario(name_or_path: str) -> Scenario:
    path = Path(name_or_path)
    if not path.suffix:
        path = SCENARIOS_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        raise ScenarioError("name", f"no scenario {name_or_path!r}", ", ".join(available()) + ", or a YAML path")
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict):
        raise ScenarioError("<document>", "is not a mapping", "a YAML mapping with name, duration_s, traffic")
    traffic = doc.get("traffic")
    if not isinstance(traffic, dict):
        raise ScenarioError("traffic", "is missing", "a mapping with pattern and protocol")
    pattern = traffic.get("pattern")
    if pattern not in PATTERNS:
        raise ScenarioError("traffic.pattern", f"got {pattern!r}", ", ".join(PATTERNS))
    protocol = traffic.get("protocol", "tcp")
    if protocol not in PROTOCOLS:
        raise ScenarioError("traffic.protocol", f"got {protocol!r}", ", ".join(PROTOCOLS))
    duration = doc.get("duration_s", 10)
    if not isinstance(duration, (int, float)) or not 3 <= duration <= 300:
        raise ScenarioError("duration_s", f"got {duration!r}", "3 to 300 seconds")
    events = []
    for i, event in enumerate(doc.get("events") or []):
        if not isinstance(event, dict) or "link_down" not in event:
            raise ScenarioError(f"events[{i}]", f"got {event!r}", "{at_s: SECONDS, link_down: " + _LINK_FORMS + "}")
        at = event.get("at_s")
        if not isinstance(at, (int, float)) or not 0 < at < duration:
            raise ScenarioError(f"events[{i}].at_s", f"got {at!r}", f"0 to {duration} (inside the run)")
        events.append(_link_down(f"events[{i}].link_down", float(at), event["link_down"]))
    if [e.at_s for e in events] != sorted(e.at_s for e in events):
        raise ScenarioError("events", "not in time order", "events sorted by at_s")
    fan_in = traffic.get("fan_in", 3)
    if not isinstance(fan_in, int) or fan_in < 2:
        raise ScenarioError("traffic.fan_in", f"got {fan_in!r}", "an integer >= 2")
    incast_start = traffic.get("incast_start_s", 0)
    if not isinstance(incast_start, (int, float)) or not 0 <= incast_start <= duration - 3:
        raise ScenarioError(
            "traffic.incast_start_s",
            f"got {incast_start!r}",
            f"0 to {duration - 3:g} (the senders need 3 s of the run)",
        )
    fabric = doc.get("fabric")
    if fabric is not None and not (isinstance(fabric, str) and _spec_file(fabric)):
        raise ScenarioError(
            "fabric",
            f"no spec {fabric!r}",
            ", ".join(sorted(p.name for p in SPECS_DIR.glob("*.yaml"))) + ", or a spec path",
        )
    return Scenario(
        str(doc.get("name", path.stem)),
        str(doc.get("description", "")),
        float(duration),
        pattern,
        protocol,
        fan_in,
        bool(traffic.get("bystander", False)),
        str(traffic.get("collective", "ring")),
        tuple(events),
        float(incast_start),
        fabric,
    )


_LINK_FORMS = "LEAF:PORT (an uplink) or {leaf: LEAF, spine: SPINE}"


def _link_down(field: str, at: float, value: object) -> LinkDown:
    if isinstance(value, dict):
        if set(value) != {"leaf", "spine"} or not all(isinstance(v, str) for v in value.values()):
            raise ScenarioError(field, f"got {value!r}", _LINK_FORMS)
        return LinkDown(at, value["leaf"], spine=value["spine"])
    leaf, _, port = str(value).rpartition(":")
    if not leaf or not port.isdigit():
        raise ScenarioError(field, f"got {value!r}", _LINK_FORMS)
    return LinkDown(at, leaf, int(port))


def spec_uplinks(spec: FabricSpec) -> dict[str, str]:
    """Every uplink a spec's fabric has, "switch:port" at its lower end -> the
    switch above, by the builders' port numbering (controller/fabric/builders.py;
    a unit test holds the two together). No fabric is built."""
    out: dict[str, str] = {}
    if spec.kind is Kind.RAIL_OPTIMIZED:
        for pod in range(spec.pods):
            for rail in range(spec.rails):
                leaf = ad.leaf_name(pod, rail)
                for j in range(spec.spines):
                    plane = rail if spec.plane_mode is PlaneMode.PER_RAIL else None
                    out[f"{leaf}:{spec.servers_per_pod + 1 + j}"] = ad.spine_name(j, plane=plane)
    elif spec.kind is Kind.FAT_TREE:
        half = spec.k // 2
        for pod in range(spec.k):
            for a in range(half):
                for e in range(half):
                    out[f"{ad.edge_name(pod, e)}:{half + 1 + a}"] = ad.agg_name(pod, a)
                for i in range(half):
                    out[f"{ad.agg_name(pod, a)}:{half + 1 + i}"] = ad.spine_name(a * half + i)
    return out


def check_events(scenario: Scenario, spec: FabricSpec) -> Scenario:
    """The scenario with every link event checked against the spec's uplinks
    and given both names (port and spine). Run before any fabric is built: a
    link that is not an uplink (a server's port, say) is refused, naming the
    field and the uplinks there are."""
    uplinks = spec_uplinks(spec)
    by_ends = {(name.rpartition(":")[0], above): name for name, above in uplinks.items()}
    events = []
    for i, event in enumerate(scenario.events):
        field = f"events[{i}].link_down"
        if event.port is None:
            name = by_ends.get((event.leaf, event.spine))
            if name is None:
                leaves = sorted({n.rpartition(":")[0] for n in uplinks})
                if event.leaf not in leaves:
                    raise ScenarioError(
                        f"{field}.leaf", f"no uplinks on {event.leaf!r} in {spec.name!r}", _listed(leaves)
                    )
                above = sorted(a for (low, a) in by_ends if low == event.leaf)
                raise ScenarioError(
                    f"{field}.spine", f"{event.leaf} has no uplink to {event.spine!r}", ", ".join(above)
                )
        else:
            name = event.link
            if name not in uplinks:
                raise ScenarioError(
                    field, f"{name} is not an uplink of {spec.name!r}", _listed_uplinks(uplinks, event.leaf)
                )
        leaf, _, port = name.rpartition(":")
        events.append(LinkDown(event.at_s, leaf, int(port), uplinks[name]))
    return replace(scenario, events=tuple(events))


def _listed(names: list[str], first: int = 12) -> str:
    more = f", ... ({len(names)} in all)" if len(names) > first else ""
    return ", ".join(names[:first]) + more if names else "none"


def _listed_uplinks(uplinks: dict[str, str], near: str, first: int = 12) -> str:
    """The uplinks, the named switch's own first; the first dozen of a big fabric."""
    if not uplinks:
        return "none (this fabric has no uplinks)"
    ordered = sorted(uplinks.items(), key=lambda kv: kv[0].rpartition(":")[0] != near)
    shown = [f"{name} (to {above})" for name, above in ordered[:first]]
    more = f", ... ({len(uplinks)} uplinks in all)" if len(uplinks) > first else ""
    return ", ".join(shown) + more
