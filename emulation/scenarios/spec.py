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
from controller.fabric.spec import SPECS_DIR

SCENARIOS_DIR = Path(__file__).parent
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
    incast_start_s: float = 0.0  # the senders start this late: the bystander is already running
    fabric: str | None = None  # the spec it runs on unless one is given: a file in the shipped specs, or a path

    def spec_path(self, override: str | None = None) -> str | None:
        if override or not self.fabric:
            return override
        return str(_spec_file(self.fabric))


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
            raise ScenarioError(f"events[{i}]", f"got {event!r}", "{at_s: SECONDS, link_down: SWITCH:PORT}")
        at = event.get("at_s")
        if not isinstance(at, (int, float)) or not 0 < at < duration:
            raise ScenarioError(f"events[{i}].at_s", f"got {at!r}", f"0 to {duration} (inside the run)")
        events.append(LinkDown(float(at), str(event["link_down"])))
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


def permutation_pairs(fabric: Fabric) -> list[tuple[NicId, NicId]]:
    """Every NIC sends to the same server slot, same rail, in the next pod."""
    pods = sorted({n.pod for n in fabric.nics})
    if len(pods) < 2:
        raise ScenarioError("traffic.pattern", f"fabric {fabric.spec.name!r} has one pod", "a fabric with 2+ pods")
    return [(n, NicId(n.rail, pods[(pods.index(n.pod) + 1) % len(pods)], n.server)) for n in fabric.nics]


def incast_pairs(
    fabric: Fabric, fan_in: int, seed: int
) -> tuple[list[tuple[NicId, NicId]], tuple[NicId, NicId] | None]:
    """(senders -> one receiver, a bystander pair), all on one rail (a server
    reaches another rail through its NIC on that rail anyway). Senders sit
    in other pods, so the incast crosses the spine tier where routing has a
    say. The bystander comes from another pod too, into a NIC beside the
    receiver (same leaf): it shares the spine -> leaf downlinks the incast
    crosses, but no sender's NIC and not the receiver's."""
    rng = random.Random(seed)
    rail = rng.choice(sorted({n.rail for n in fabric.nics}))
    on_rail = sorted(n for n in fabric.nics if n.rail == rail)
    dst = on_rail[-1]
    remote = [n for n in on_rail if n.pod != dst.pod]
    if len(remote) < fan_in:
        raise ScenarioError(
            "traffic.fan_in",
            f"{fan_in} senders on rail {rail} outside the receiver's pod",
            f"at most {len(remote)} on fabric {fabric.spec.name!r}",
        )
    senders, spare = remote[:fan_in], remote[fan_in:]
    leaf = fabric.attachment(dst).node
    beside = [n for n in on_rail if n != dst and fabric.attachment(n).node == leaf]
    bystander = (spare[-1], beside[0]) if spare and beside else None
    return [(s, dst) for s in senders], bystander
