"""Roles, what each may call, and who holds which: the API's authorization.

An identity is a client certificate's common name. The policy file maps
identities to roles, and may name the switches an agent reports for:

    identities:
      scheduler: scheduler        # the CN of the Slurm/Kubernetes integration's certificate
      agent-rack-7: {role: agent, switches: [ryl0r0, ryl0r1]}
      alice: operator
      grafana: viewer

An agent without `switches` may report for every switch (one fabric-wide
collector); one with `switches` only for those.

A certificate can be revoked by its SHA-256 fingerprint (`railyard certs
fingerprint FILE`), whatever identity it names:

    revoked:
      - sha256:3f0c...e1

A method no role lists is refused to everyone; the health and reflection
services answer every identity the policy gives a role (probes, grpcurl).
"""

from __future__ import annotations

import hashlib
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from controller.errors import FieldError
from controller.yamldoc import read_yaml

PLACEMENT = "/railyard.v1.PlacementService/"
FABRIC = "/railyard.v1.FabricService/"
TELEMETRY = "/railyard.v1.TelemetryService/"
TE = "/railyard.v1.TeService/"
OPEN_PREFIXES = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1.ServerReflection/",
    "/grpc.reflection.v1alpha.ServerReflection/",
)


class Role(StrEnum):
    SCHEDULER = "scheduler"
    AGENT = "agent"
    OPERATOR = "operator"
    VIEWER = "viewer"


# ScorePlacements changes nothing: any role that reads jobs may ask for scores.
_PLACEMENT_READS = {PLACEMENT + m for m in ("GetJob", "ListJobs", "ListJobFlows", "WatchJobs", "ScorePlacements")}
_FABRIC_READS = {FABRIC + m for m in ("GetFabric", "GetFreeCapacity", "ListLinks", "ListPins")}
_FABRIC_CHANGES = {
    FABRIC + m for m in ("DrainLink", "UndrainLink", "DrainSwitch", "UndrainSwitch", "PinFlow", "UnpinFlow")
}
_TE_READS = {TE + "WatchDecisions"}  # TE's decisions, and in advisory mode its recommendations
ROLE_METHODS: Mapping[Role, frozenset[str]] = {
    # A scheduler places where there is room and the links are cool: it reads
    # free capacity, the fabric and its links too (not pins: an operator's).
    Role.SCHEDULER: frozenset(
        {PLACEMENT + "PlaceJob", PLACEMENT + "ReleaseJob", *_PLACEMENT_READS, *_FABRIC_READS - {FABRIC + "ListPins"}}
    ),
    Role.AGENT: frozenset({TELEMETRY + "ReportTelemetry"}),
    Role.OPERATOR: frozenset({*_FABRIC_CHANGES, *_FABRIC_READS, *_PLACEMENT_READS, *_TE_READS}),
    Role.VIEWER: frozenset({*_FABRIC_READS, *_PLACEMENT_READS, *_TE_READS}),
}


class PolicyError(FieldError):
    context = "policy"


@dataclass(frozen=True)
class Grant:
    role: Role
    switches: frozenset[str] | None = None  # an agent's switches; None: every switch


FINGERPRINT = re.compile(r"sha256:([0-9a-f]{64})")


def fingerprint(cert_pem: bytes | str) -> str:
    """A certificate's SHA-256 fingerprint (of its DER form), as the policy's `revoked` lists it."""
    pem = cert_pem.decode() if isinstance(cert_pem, bytes) else cert_pem
    return "sha256:" + hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()


@dataclass(frozen=True)
class Policy:
    grants: Mapping[str, Grant]  # identity -> what it may do
    revoked: frozenset[str] = field(default_factory=frozenset)  # fingerprints of certificates refused at any role

    def grant_of(self, identity: str) -> Grant | None:
        return self.grants.get(identity)

    def check_switches(self, known: set[str] | frozenset[str]) -> None:
        """Every switch an agent is named for is one of the fabric's."""
        for identity, grant in sorted(self.grants.items()):
            unknown = sorted((grant.switches or frozenset()) - known)
            if unknown:
                raise PolicyError(
                    f"identities.{identity}.switches", f"{unknown[0][:64]!r} is not a switch of the fabric"
                )

    @staticmethod
    def allows(role: Role, method: str) -> bool:
        return method.startswith(OPEN_PREFIXES) or method in ROLE_METHODS[role]


def policy_from_doc(doc: Any) -> Policy:
    if not isinstance(doc, dict) or "identities" not in doc or not set(doc) <= {"identities", "revoked"}:
        raise PolicyError(
            "policy", "must be a mapping of identities (and optionally revoked)", "identities: {NAME: ROLE, ...}"
        )
    identities = doc["identities"]
    if not isinstance(identities, dict) or not identities:
        raise PolicyError("identities", "must be a non-empty mapping", "NAME: ROLE, one per identity")
    grants: dict[str, Grant] = {}
    for name, entry in identities.items():
        if not isinstance(name, str) or not name or len(name) > 64:
            raise PolicyError("identities", f"{str(name)[:64]!r} is not an identity", "a certificate CN of 1-64 chars")
        grants[name] = _grant(f"identities.{name}", entry)
    return Policy(grants, _revoked(doc.get("revoked", [])))


def _revoked(entries: Any) -> frozenset[str]:
    if not isinstance(entries, list):
        raise PolicyError("revoked", "must be a list", "[sha256:HEX, ...] (railyard certs fingerprint FILE)")
    for i, entry in enumerate(entries):
        if not isinstance(entry, str) or FINGERPRINT.fullmatch(entry) is None:
            raise PolicyError(
                f"revoked[{i}]", f"{str(entry)[:80]!r} is not a fingerprint", "sha256: and 64 lowercase hex digits"
            )
    return frozenset(entries)


def _grant(field: str, entry: Any) -> Grant:
    if not isinstance(entry, dict):
        entry = {"role": entry}
    if not entry.keys() <= {"role", "switches"}:
        raise PolicyError(
            field, f"unknown keys {sorted(map(str, entry.keys() - {'role', 'switches'}))}", "role, switches"
        )
    role = entry.get("role")
    if role not in set(Role):
        raise PolicyError(
            f"{field}.role" if "switches" in entry else field, f"{str(role)[:32]!r} is not a role", ", ".join(Role)
        )
    if "switches" not in entry:
        return Grant(Role(role))
    switches = entry["switches"]
    if role != Role.AGENT:
        raise PolicyError(f"{field}.switches", "only an agent reports for switches", "drop it, or role: agent")
    if not isinstance(switches, list) or not switches or not all(isinstance(s, str) and s for s in switches):
        raise PolicyError(f"{field}.switches", "must be a non-empty list of switch names", "[ryl0r0, ...]")
    return Grant(Role(role), frozenset(switches))


def load_policy(path: str | Path) -> Policy:
    return policy_from_doc(read_yaml(path, PolicyError))
