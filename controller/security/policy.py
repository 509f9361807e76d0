"""Roles, what each may call, and who holds which: the API's authorization.

An identity is a client certificate's common name. The policy file maps
identities to roles:

    identities:
      scheduler: scheduler        # the CN of the Slurm/Kubernetes integration's certificate
      agent-rack-7: agent
      alice: operator
      grafana: viewer

A method no role lists is refused to everyone; the health and reflection
services answer any authenticated caller (probes, grpcurl).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from controller.errors import FieldError
from controller.yamldoc import read_yaml

PLACEMENT = "/railyard.v1.PlacementService/"
FABRIC = "/railyard.v1.FabricService/"
TELEMETRY = "/railyard.v1.TelemetryService/"
OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.v1alpha.ServerReflection/")


class Role(StrEnum):
    SCHEDULER = "scheduler"
    AGENT = "agent"
    OPERATOR = "operator"
    VIEWER = "viewer"


_PLACEMENT_READS = {PLACEMENT + m for m in ("GetJob", "ListJobs", "ListJobFlows", "WatchJobs")}
_FABRIC_READS = {FABRIC + m for m in ("GetFabric", "GetFreeCapacity", "ListLinks", "ListPins")}
_FABRIC_CHANGES = {
    FABRIC + m for m in ("DrainLink", "UndrainLink", "DrainSwitch", "UndrainSwitch", "PinFlow", "UnpinFlow")
}
ROLE_METHODS: Mapping[Role, frozenset[str]] = {
    Role.SCHEDULER: frozenset({PLACEMENT + "PlaceJob", PLACEMENT + "ReleaseJob", *_PLACEMENT_READS}),
    Role.AGENT: frozenset({TELEMETRY + "ReportTelemetry"}),
    Role.OPERATOR: frozenset({*_FABRIC_CHANGES, *_FABRIC_READS, *_PLACEMENT_READS}),
    Role.VIEWER: frozenset({*_FABRIC_READS, *_PLACEMENT_READS}),
}


class PolicyError(FieldError):
    context = "policy"


@dataclass(frozen=True)
class Policy:
    roles: Mapping[str, Role]  # identity -> role

    def role_of(self, identity: str) -> Role | None:
        return self.roles.get(identity)

    @staticmethod
    def allows(role: Role, method: str) -> bool:
        return method.startswith(OPEN_PREFIXES) or method in ROLE_METHODS[role]


def policy_from_doc(doc: Any) -> Policy:
    if not isinstance(doc, dict) or set(doc) != {"identities"}:
        raise PolicyError("policy", "must be a mapping with one key, identities", "identities: {NAME: ROLE, ...}")
    identities = doc["identities"]
    if not isinstance(identities, dict) or not identities:
        raise PolicyError("identities", "must be a non-empty mapping", "NAME: ROLE, one per identity")
    roles: dict[str, Role] = {}
    for name, role in identities.items():
        if not isinstance(name, str) or not name or len(name) > 64:
            raise PolicyError("identities", f"{str(name)[:64]!r} is not an identity", "a certificate CN of 1-64 chars")
        if role not in set(Role):
            raise PolicyError(f"identities.{name}", f"{str(role)[:32]!r} is not a role", ", ".join(Role))
        roles[name] = Role(role)
    return Policy(roles)


def load_policy(path: str | Path) -> Policy:
    return policy_from_doc(read_yaml(path, PolicyError))
