"""Telemetry as the agent reports it, from what the fluid model moved in one
interval. Pure (the noise comes from the caller's generator).

- a flow record per flow that sent in the interval or is sending at its
  end: its rate is the interval's byte-counter delta (a flow that finished
  half-way reports half its rate; one done or off all interval reports
  nothing and goes quiet, as in the fabric), and the ingress leaf's egress
  it takes now (and a second hashing switch's, where its route has one);
- a port sample per loaded switch egress: the interval's mean load, times
  the noise, smoothed with the LinkView's EWMA; a down port is always
  reported (idle ones are left out: the engine reads a missing port as idle).

Both go to the engine as frames (columns), as a cycle reads them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from controller.te.engine import FlowFrame, PortFrame
from controller.te.engine.links import UNKNOWN, LinkIndex
from controller.te.view import EWMA_ALPHA, FlowKey
from emulation.simulate.routes import Network, Routes


class Sensor:
    def __init__(
        self, network: Network, routes: Routes, keys: Sequence[FlowKey], noise: float, index: LinkIndex
    ) -> None:
        self.network = network
        self.routes = routes
        self.keys = list(keys)
        self.noise = noise
        self.ewma = np.zeros(network.size)
        self.seen = np.zeros(network.size, dtype=bool)
        # The engine's egress numbers for ours: telemetry goes to it as frames.
        self.index = index
        self.engine_id = np.array([self.index.ids.get(e, UNKNOWN) for e in network.egresses], dtype=np.int64)

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
    ) -> tuple[FlowFrame, PortFrame]:
        n = len(self.keys)
        noise = self.noise
        flow_noise = 1.0 + rng.uniform(-noise, noise, n) if noise else np.ones(n)
        port_noise = 1.0 + rng.uniform(-noise, noise, self.network.size) if noise else np.ones(self.network.size)
        on = np.flatnonzero(sending | (moved_bits > 0))
        ingress = self.engine_id[self.routes.first_hop(route[on], on)]
        transit = self.routes.transit_hop(route[on])
        keys = self.keys
        flows = FlowFrame(
            [keys[i] for i in on.tolist()],
            (moved_bits / interval_s * flow_noise)[on],
            np.full(len(on), now),
            ingress,
            np.where(transit >= 0, self.engine_id[transit], -1),
        )
        sample = link_bits / interval_s * port_noise
        # The LinkView's smoothing: the first sample as is, then an EWMA.
        self.ewma[:] = np.where(self.seen, EWMA_ALPHA * sample + (1 - EWMA_ALPHA) * self.ewma, sample)
        self.seen |= sample > 0
        report = np.flatnonzero(self.network.is_switch_port & ((self.ewma > 0) | down))
        ports = PortFrame.empty(self.index)
        at = self.engine_id[report]
        ports.tx_bps[at] = self.ewma[report]
        ports.observed_at[at] = now
        ports.up[at] = ~down[report]
        return flows, ports
