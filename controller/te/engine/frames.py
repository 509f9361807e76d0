"""Telemetry as the engine reads it: one snapshot of flow records and one of
port samples, as columns. The LinkView keeps samples by key, as they
arrive; a cycle reads all of them at once, tens of thousands on a large
fabric, and reads them as arrays. A producer that has its samples as
arrays already (the simulator's sensor) makes frames directly. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from controller.fabric import Endpoint
from controller.te.engine.links import UNKNOWN, LinkIndex
from controller.te.view import FlowKey, FlowSample, PortSample


def egress_id(ids: Mapping[Endpoint, int], egress: Endpoint | None) -> int:
    """A record's egress as a LinkIndex id: -1 where unreported, UNKNOWN where not an egress of the fabric."""
    return -1 if egress is None else ids.get(egress, UNKNOWN)


@dataclass(frozen=True, eq=False)
class FlowFrame:
    """Flow records, one row each. `ingress` and `transit`: the egress ids
    (LinkIndex) the flow's ingress leaf and a second hashing switch send it
    out of; -1 where unreported, UNKNOWN where not an egress of the fabric."""

    keys: Sequence[FlowKey]
    rate_bps: np.ndarray
    observed_at: np.ndarray
    ingress: np.ndarray
    transit: np.ndarray

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def of(cls, index: LinkIndex, flows: Mapping[FlowKey, FlowSample]) -> FlowFrame:
        ids = index.ids
        n = len(flows)
        samples = flows.values()
        return cls(
            list(flows),
            np.fromiter((s.rate_bps for s in samples), dtype=float, count=n),
            np.fromiter((s.observed_at for s in samples), dtype=float, count=n),
            np.fromiter((egress_id(ids, s.ingress) for s in samples), np.int64, n),
            np.fromiter((egress_id(ids, s.transit) for s in samples), np.int64, n),
        )

    def since(self, cutoff: float) -> FlowFrame:
        """The records observed at `cutoff` or later."""
        kept = np.flatnonzero(self.observed_at >= cutoff)
        if len(kept) == len(self.keys):
            return self
        keys = self.keys
        return FlowFrame(
            [keys[i] for i in kept.tolist()],
            self.rate_bps[kept],
            self.observed_at[kept],
            self.ingress[kept],
            self.transit[kept],
        )

    @classmethod
    def empty(cls) -> FlowFrame:
        none = np.zeros(0)
        return cls([], none, none, none.astype(np.int64), none.astype(np.int64))


@dataclass(frozen=True, eq=False)
class PortFrame:
    """Port samples, one row per egress of the LinkIndex (and its pad):
    what each sends (smoothed, as the LinkView keeps it), when that was
    observed (-inf: never reported) and whether the port has carrier."""

    tx_bps: np.ndarray
    observed_at: np.ndarray
    up: np.ndarray

    @classmethod
    def of(cls, index: LinkIndex, ports: Mapping[Endpoint, PortSample]) -> PortFrame:
        frame = cls.empty(index)
        ids = index.ids
        for egress, sample in ports.items():
            i = ids.get(egress)
            if i is not None:
                frame.tx_bps[i] = sample.tx_bps
                frame.observed_at[i] = sample.observed_at
                frame.up[i] = sample.up
        return frame

    @classmethod
    def empty(cls, index: LinkIndex) -> PortFrame:
        return cls.unreported(len(index.capacity))

    @classmethod
    def unreported(cls, n: int) -> PortFrame:
        """`n` rows, none reported yet: nothing sent, never observed, carrier up."""
        return cls(np.zeros(n), np.full(n, -np.inf), np.ones(n, dtype=bool))


def frames(
    index: LinkIndex,
    flows: FlowFrame | Mapping[FlowKey, FlowSample],
    ports: PortFrame | Mapping[Endpoint, PortSample],
) -> tuple[FlowFrame, PortFrame]:
    """Telemetry as frames, whichever form it came in."""
    return (
        flows if isinstance(flows, FlowFrame) else FlowFrame.of(index, flows),
        ports if isinstance(ports, PortFrame) else PortFrame.of(index, ports),
    )
