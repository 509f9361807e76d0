"""Telemetry as the agent reports it, from what the fluid model moved in one
interval. Pure (the noise comes from the caller's generator).

- a flow record per flow that sent in the interval or is sending at its
  end: its rate is the interval's byte-counter delta (a flow that finished
  half-way reports half its rate; one done or off all interval reports
  nothing and goes quiet, as in the fabric), its byte counter, and the
  ingress leaf's egress it takes now (and a second hashing switch's, where
  its route has one);
- a port sample per loaded switch egress: the interval's mean load, times
  the noise, smoothed with the LinkView's EWMA; a down port is always
  reported (idle ones are left out: the engine reads a missing port as idle).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from controller.fabric import Endpoint
from controller.te.view import EWMA_ALPHA, FlowKey, FlowSample, PortSample
from emulation.simulate.routes import Network, Routes


class Sensor:
    def __init__(self, network: Network, routes: Routes, keys: Sequence[FlowKey], noise: float) -> None:
        self.network = network
        self.routes = routes
        self.keys = list(keys)
        self.noise = noise
        self.ewma = np.zeros(network.size)
        self.seen = np.zeros(network.size, dtype=bool)
        self.bytes_total = np.zeros(len(self.keys))

    def sample(
        self,
        now: float,
        interval_s: float,
        moved_bits: np.ndarray,
        sending: np.ndarray,
        link_bits: np.ndarray,
        route: np.ndarray,
        down: np.ndarray,
        rng: np.random.Generator,
    ) -> tuple[dict[FlowKey, FlowSample], dict[Endpoint, PortSample]]:
        n = len(self.keys)
        noise = self.noise
        flow_noise = 1.0 + rng.uniform(-noise, noise, n) if noise else np.ones(n)
        port_noise = 1.0 + rng.uniform(-noise, noise, self.network.size) if noise else np.ones(self.network.size)
        self.bytes_total += moved_bits / 8.0
        on = np.flatnonzero(sending | (moved_bits > 0))
        measured = (moved_bits / interval_s * flow_noise)[on].tolist()
        counted = self.bytes_total[on].astype(np.int64).tolist()
        ingress = self.routes.first_hop(route[on], on).tolist()
        transit = self.routes.transit_hop(route[on]).tolist()
        egresses = self.network.egresses
        keys = self.keys
        flows = {
            keys[i]: FlowSample(rate, total, now, egresses[hop], egresses[up] if up >= 0 else None)
            for i, rate, total, hop, up in zip(on.tolist(), measured, counted, ingress, transit)
        }
        sample = link_bits / interval_s * port_noise
        # The LinkView's smoothing: the first sample as is, then an EWMA.
        self.ewma[:] = np.where(self.seen, EWMA_ALPHA * sample + (1 - EWMA_ALPHA) * self.ewma, sample)
        self.seen |= sample > 0
        report = np.flatnonzero(self.network.is_switch_port & ((self.ewma > 0) | down))
        ports = {
            egresses[j]: PortSample(tx, 0, 0, now, up)
            for j, tx, up in zip(report.tolist(), self.ewma[report].tolist(), (~down[report]).tolist())
        }
        return flows, ports
