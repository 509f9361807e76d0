"""The live link view: what telemetry says each egress port is doing. Pure.

Rates are smoothed (EWMA) so one noisy sample does not move placement, and
every value carries the time it was observed: `fresh()` only returns what is
younger than `max_age_s`, so stale telemetry is never acted on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from controller.fabric import Endpoint

EWMA_ALPHA = 0.5
DEFAULT_MAX_AGE_S = 2.0


@dataclass(frozen=True, slots=True)
class PortSample:
    tx_bps: float
    queue_bytes: int
    drops_total: int
    observed_at: float
    up: bool = True


@dataclass(frozen=True, slots=True)
class PathSample:
    """A CSIG-style signal for one leaf -> spine -> leaf path."""

    min_available_bps: float
    max_queue_bytes: int
    bottleneck: Endpoint
    observed_at: float


@dataclass(frozen=True, slots=True)
class FlowSample:
    """A flow record as measured in the fabric (5-tuple -> rate)."""

    rate_bps: float
    bytes_total: int
    observed_at: float
    ingress: Endpoint | None = None  # the ingress leaf's egress port for this flow, when known
    transit: Endpoint | None = None  # the egress a second hashing switch chose (a three-tier spine's), when known


FlowKey = tuple[str, str, str, int, int]  # src address, dst address, protocol, src port, dst port


def reverse_key(key: FlowKey) -> FlowKey:
    """The 5-tuple of the packets coming back: a TCP flow's ACKs."""
    src, dst, protocol, sport, dport = key
    return (dst, src, protocol, dport, sport)


class _Observed(Protocol):
    @property
    def observed_at(self) -> float: ...


_K = TypeVar("_K")
_S = TypeVar("_S", bound=_Observed)


def _drop_before(table: dict[_K, _S], cutoff: float) -> None:
    for key in [k for k, s in table.items() if s.observed_at < cutoff]:
        del table[key]


class LinkView:
    def __init__(self, alpha: float = EWMA_ALPHA) -> None:
        self.alpha = alpha
        self.ports: dict[Endpoint, PortSample] = {}
        self.paths: dict[tuple[str, str, str], PathSample] = {}
        self.flows: dict[FlowKey, FlowSample] = {}

    def observe_port(self, egress: Endpoint, sample: PortSample) -> None:
        previous = self.ports.get(egress)
        if previous is not None:
            if sample.observed_at <= previous.observed_at:
                return  # out of order or duplicate: keep the newer
            sample = replace(sample, tx_bps=self.alpha * sample.tx_bps + (1 - self.alpha) * previous.tx_bps)
        self.ports[egress] = sample

    def observe_path(self, key: tuple[str, str, str], sample: PathSample) -> None:
        previous = self.paths.get(key)
        if previous is None or sample.observed_at > previous.observed_at:
            self.paths[key] = sample

    def observe_flow(self, key: FlowKey, sample: FlowSample) -> None:
        previous = self.flows.get(key)
        if previous is None or sample.observed_at > previous.observed_at:
            self.flows[key] = sample

    def forget_before(self, cutoff: float) -> None:
        """Drops samples older than `cutoff`: flows end, and memory stays bounded."""
        _drop_before(self.ports, cutoff)
        _drop_before(self.paths, cutoff)
        _drop_before(self.flows, cutoff)

    def fresh_ports(self, now: float, max_age_s: float = DEFAULT_MAX_AGE_S) -> dict[Endpoint, PortSample]:
        return {e: s for e, s in self.ports.items() if now - s.observed_at <= max_age_s}

    def fresh_load(self, now: float, max_age_s: float = DEFAULT_MAX_AGE_S) -> dict[Endpoint, float]:
        return {e: s.tx_bps for e, s in self.ports.items() if now - s.observed_at <= max_age_s}
