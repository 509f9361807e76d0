"""Scenarios as data: YAML in emulation/scenarios/, validated like fabric specs.

A scenario says what traffic to run and what happens during the run; which
flows exist is decided here from the fabric and the seed, never told to the
controller (it learns them from telemetry).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import yaml

from controller.errors import FieldError
from controller.fabric import Fabric, NicId

SCENARIOS_DIR = Path(__file__).parent / "scenarios"
PATTERNS = ("permutation", "incast", "job")
PROTOCOLS = ("tcp", "udp")


class ScenarioError(FieldError):
    context = "scenario"


@dataclass(frozen=True)
class LinkDown:
    at_s: float
    link: str  # "switch:port"


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
            raise ScenarioError(f"events[{i}]", f"got {event!r}", "{at_s: SECONDS, link_down: SWITCH:PORT}")
        at = event.get("at_s")
        if not isinstance(at, (int, float)) or not 0 < at < duration:
            raise ScenarioError(f"events[{i}].at_s", f"got {at!r}", f"0 to {duration} (inside the run)")
        events.append(LinkDown(float(at), str(event["link_down"])))
    fan_in = traffic.get("fan_in", 3)
    if not isinstance(fan_in, int) or fan_in < 2:
        raise ScenarioError("traffic.fan_in", f"got {fan_in!r}", "an integer >= 2")
    return Scenario(str(doc.get("name", path.stem)), str(doc.get("description", "")), float(duration), pattern,
                    protocol, fan_in, bool(traffic.get("bystander", False)), str(traffic.get("collective", "ring")),
                    tuple(events))


def permutation_pairs(fabric: Fabric) -> list[tuple[NicId, NicId]]:
    """Every NIC sends to the same server slot, same rail, in the next pod."""
    pods = sorted({n.pod for n in fabric.nics})
    if len(pods) < 2:
        raise ScenarioError("traffic.pattern", f"fabric {fabric.spec.name!r} has one pod", "a fabric with 2+ pods")
    return [(n, NicId(n.rail, pods[(pods.index(n.pod) + 1) % len(pods)], n.server)) for n in fabric.nics]


def incast_pairs(fabric: Fabric, fan_in: int, seed: int) -> tuple[list[tuple[NicId, NicId]], tuple[NicId, NicId]]:
    """(senders -> one receiver, a bystander pair that crosses the same spines)."""
    rng = random.Random(seed)
    rail = rng.choice(sorted({n.rail for n in fabric.nics}))
    on_rail = sorted(n for n in fabric.nics if n.rail == rail)
    dst = on_rail[-1]
    senders = [n for n in on_rail if n != dst][:fan_in]
    if len(senders) < fan_in:
        raise ScenarioError("traffic.fan_in", f"{fan_in} senders on one rail", f"at most {len(on_rail) - 1} here")
    others = sorted(n for n in fabric.nics if n.rail != rail) or [n for n in on_rail if n not in senders + [dst]]
    bystander_src = next(n for n in others if n.pod != dst.pod) if others else None
    bystander = (bystander_src, NicId(bystander_src.rail, dst.pod, dst.server)) if bystander_src else None
    return [(s, dst) for s in senders], bystander
