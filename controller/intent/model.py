"""Intent: the only durable state. Operator and scheduler wishes, nothing derived.

Pure. An `Intent` is an immutable snapshot; every change produces a new one
after validation against the fabric, so a rejected request changes nothing.
The overlay (what the switches should hold) is derived from it elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from typing import Any

from controller.errors import NAME_RULE, Conflict, FieldError, NotFound, shown, valid_name
from controller.fabric import Fabric, FabricError, NicId
from controller.fabric import addressing as ad
from controller.te.jobs import Drains, Job
from controller.te.load import drained


class IntentError(FieldError):
    context = "intent"


class RecordKind(StrEnum):
    """What a stored record holds. The value is its kind on disk (SQLite's
    `kind` column, the etcd key's segment): renaming one orphans stored intent."""

    PIN = "pin"
    JOB = "job"
    DRAINED_SWITCH = "drain-switch"
    DRAINED_LINK = "drain-link"
    RETIRED = "retired"  # a released job's retry key (retries.py)


PROTOCOLS = ("tcp", "udp")


@dataclass(frozen=True, order=True)
class FlowMatch:
    """Which packets a pin steers: a NIC pair, optionally narrowed to one
    transport 5-tuple. Port 0 means any port."""

    src: NicId
    dst: NicId
    protocol: str = ""  # "" = any IP protocol
    src_port: int = 0
    dst_port: int = 0

    def reversed(self) -> FlowMatch:
        return FlowMatch(self.dst, self.src, self.protocol, self.dst_port, self.src_port)

    def describe(self) -> str:
        text = f"{ad.nic_address(self.src)}->{ad.nic_address(self.dst)}"
        if self.protocol:
            text += f" {self.protocol} {self.src_port or '*'}->{self.dst_port or '*'}"
        return text


@dataclass(frozen=True, order=True)
class FlowPin:
    """Steer matching packets across one spine (a core switch in a fat tree).
    `symmetric` also pins the reverse direction, so TCP ACKs do not hash onto
    the congested uplink the data was moved away from."""

    name: str
    match: FlowMatch
    spine: str
    symmetric: bool = True


@dataclass(frozen=True)
class Intent:
    pins: Mapping[str, FlowPin] = field(default_factory=dict)
    jobs: Mapping[str, Job] = field(default_factory=dict)
    drains: Drains = field(default_factory=Drains)
    revision: int = 0

    def with_pin(self, pin: FlowPin) -> Intent:
        return replace(self, pins={**self.pins, pin.name: pin}, revision=self.revision + 1)

    def without_pin(self, name: str) -> Intent:
        if name not in self.pins:
            raise NotFound(f"no pin named {shown(name)}")
        pins = dict(self.pins)
        del pins[name]
        return replace(self, pins=pins, revision=self.revision + 1)

    def with_jobs(self, jobs: Mapping[str, Job], drains: Drains | None = None) -> Intent:
        """Replaces the given jobs (and the drains, if given) in one revision."""
        return replace(
            self,
            jobs={**self.jobs, **jobs},
            drains=self.drains if drains is None else drains,
            revision=self.revision + 1,
        )

    def without_job(self, job_id: str) -> Intent:
        if job_id not in self.jobs:
            raise NotFound(f"no job {shown(job_id)}")
        jobs = dict(self.jobs)
        del jobs[job_id]
        return replace(self, jobs=jobs, revision=self.revision + 1)

    def object_counts(self) -> dict[str, int]:
        return {
            "pin": len(self.pins),
            "job": len(self.jobs),
            "drain": len(self.drains.switches) + len(self.drains.links),
        }

    @cached_property
    def job_pairs(self) -> frozenset[tuple[NicId, NicId]]:
        """NIC pairs placed jobs' flows run between; computed once per snapshot."""
        return frozenset((f.src, f.dst) for job in self.jobs.values() for f in job.flows)

    @cached_property
    def pinned_pairs(self) -> frozenset[tuple[NicId, NicId]]:
        """NIC pairs an operator's pin steers: adaptive TE leaves them alone
        (a placed job's flows it may rebalance among their spines)."""
        return frozenset((m.src, m.dst) for m in self.steered)

    @cached_property
    def steered(self) -> dict[FlowMatch, str]:
        """Which pin steers each match (both directions of symmetric pins)."""
        return {m: pin.name for pin in self.pins.values() for m in directions(pin)}


# --- validation --------------------------------------------------------------


def parse_nic(fabric: Fabric, value: str, where: str) -> NicId:
    try:
        nic = ad.parse_nic_address(value)
    except ad.AddressError as exc:
        raise IntentError(where, str(exc), "a NIC address 10.<rail>.<pod>.<server+1> of this fabric") from None
    try:
        fabric.access_link(nic)
    except FabricError:
        raise IntentError(
            where,
            f"{value} is not a NIC of fabric {fabric.spec.name!r}",
            "a NIC address listed by `railyard fabric show`",
        ) from None
    return nic


def validate_match(fabric: Fabric, match: FlowMatch, where: str = "match") -> None:
    if match.src == match.dst:
        raise IntentError(f"{where}.dst", "equals the source NIC", "a different NIC")
    if match.protocol not in ("", *PROTOCOLS):
        raise IntentError(f"{where}.protocol", f"{match.protocol!r} is not supported", "'', 'tcp', 'udp'")
    for name in ("src_port", "dst_port"):
        port = getattr(match, name)
        if not 0 <= port <= 65535:
            raise IntentError(f"{where}.{name}", f"{port} is out of range", "0 (any) to 65535")
        if port and not match.protocol:
            raise IntentError(f"{where}.{name}", "a port needs a protocol", "set protocol to 'tcp' or 'udp'")
    if not fabric.equal_cost_paths(match.src, match.dst):
        raise IntentError(
            f"{where}.dst",
            f"{ad.nic_address(match.dst)} is not reachable from {ad.nic_address(match.src)}"
            " through the fabric (separate planes meet only inside a server)",
            "a NIC of the same plane",
        )


def spines_between(fabric: Fabric, src: NicId, dst: NicId) -> tuple[str, ...]:
    """The top-tier switches that equal-cost paths from src to dst cross."""
    return fabric.vias(src, dst)


def validate_pin(fabric: Fabric, intent: Intent, pin: FlowPin) -> None:
    """Raises IntentError/Conflict; returns only if `intent.with_pin(pin)` is sound."""
    if not valid_name(pin.name):
        raise IntentError("name", f"{shown(pin.name)} is not a valid pin name", NAME_RULE)
    validate_match(fabric, pin.match)
    allowed = spines_between(fabric, pin.match.src, pin.match.dst)
    if not allowed:
        raise IntentError(
            "match.dst", "source and destination share a leaf; there is no spine to choose", "NICs in different pods"
        )
    if pin.spine not in allowed:
        raise IntentError("spine", f"{pin.spine!r} is not on an equal-cost path of this flow", ", ".join(allowed))
    for match in directions(pin):
        owner = intent.steered.get(match)
        if owner is not None and owner != pin.name:
            raise Conflict(f"pin {owner!r} already steers {match.describe()}")
        # A drain refuses to cross a pin (drains.py); a pin must not cross a drain either.
        hit = drained(fabric, intent.drains, fabric.egress_path(match.src, match.dst, pin.spine))
        if hit:
            raise Conflict(
                f"pin {pin.name!r} would steer {match.describe()} across {hit}, which is drained; "
                "undrain it first, or pin another spine"
            )


def directions(pin: FlowPin) -> tuple[FlowMatch, ...]:
    return (pin.match, pin.match.reversed()) if pin.symmetric else (pin.match,)


# --- durable form (the store keeps these JSON documents) ----------------------


def pin_to_doc(pin: FlowPin) -> dict[str, Any]:
    m = pin.match
    return {
        "src": ad.nic_ip(m.src),
        "dst": ad.nic_ip(m.dst),
        "protocol": m.protocol,
        "src_port": m.src_port,
        "dst_port": m.dst_port,
        "spine": pin.spine,
        "symmetric": pin.symmetric,
    }


def pin_from_doc(name: str, doc: Mapping[str, Any]) -> FlowPin:
    match = FlowMatch(
        ad.parse_nic_address(doc["src"]),
        ad.parse_nic_address(doc["dst"]),
        doc["protocol"],
        int(doc["src_port"]),
        int(doc["dst_port"]),
    )
    return FlowPin(name, match, doc["spine"], bool(doc["symmetric"]))
