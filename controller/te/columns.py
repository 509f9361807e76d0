"""The live view's samples kept as columns as they arrive, so that a TE
cycle reads a copy of arrays instead of converting every sample again.

At 16K GPUs a cycle reads some 13,000 flow records and 16,000 port
samples. Converted from the view's dictionaries each cycle (frames.py's
`FlowFrame.of`, `PortFrame.of`), that was three quarters of the cycle's
time under the interpreter lock, in one stretch the API could not step
into (the ft2-16k soak, py-spy --gil). Kept here, one row written per
record on the ingest thread, a cycle's frames cost a few array copies.

Rows are laid out as the view's dictionaries order their keys (a flow
seen again keeps its row; a forgotten one leaves, and one seen anew goes
last), so a cycle sees its flows in the same order either way. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from controller.fabric import Endpoint
from controller.te.engine.frames import FlowFrame, PortFrame, egress_id
from controller.te.view import FlowKey, FlowSample, PortSample

MIN_ROWS = 1024


class PortColumns:
    """Per egress id (LinkIndex's, and its pad row): what the view holds."""

    def __init__(self, ids: Mapping[Endpoint, int]) -> None:
        self.ids = ids
        self.frame = PortFrame.unreported(len(ids) + 1)

    def observe(self, egress: Endpoint, sample: PortSample) -> None:
        i = self.ids.get(egress)
        if i is not None:
            self.frame.tx_bps[i], self.frame.observed_at[i], self.frame.up[i] = (
                sample.tx_bps,
                sample.observed_at,
                sample.up,
            )

    def forget_before(self, cutoff: float) -> None:
        old = self.frame.observed_at < cutoff
        self.frame.tx_bps[old], self.frame.observed_at[old], self.frame.up[old] = 0.0, -np.inf, True

    def copy(self) -> PortFrame:
        f = self.frame
        return PortFrame(f.tx_bps.copy(), f.observed_at.copy(), f.up.copy())


class FlowColumns:
    """One row per flow record the view holds, and rows of forgotten flows
    until there are as many of those as live ones (then compacted)."""

    def __init__(self, ids: Mapping[Endpoint, int]) -> None:
        self.ids = ids
        self.row: dict[FlowKey, int] = {}
        self.keys: list[FlowKey | None] = []
        self.rate_bps = np.zeros(MIN_ROWS)
        self.observed_at = np.zeros(MIN_ROWS)
        self.ingress = np.zeros(MIN_ROWS, dtype=np.int64)
        self.transit = np.zeros(MIN_ROWS, dtype=np.int64)
        self.live = np.zeros(MIN_ROWS, dtype=bool)

    def observe(self, key: FlowKey, sample: FlowSample) -> None:
        r = self.row.get(key)
        if r is None:
            r = self.row[key] = len(self.keys)
            self.keys.append(key)
            if r == len(self.live):
                self._grow()
            self.live[r] = True
        self.rate_bps[r], self.observed_at[r] = sample.rate_bps, sample.observed_at
        self.ingress[r], self.transit[r] = egress_id(self.ids, sample.ingress), egress_id(self.ids, sample.transit)

    def _grow(self) -> None:
        self._reallocate(2 * len(self.live))

    def _reallocate(self, size: int, rows: np.ndarray | slice = slice(None)) -> None:
        """Every column anew, `size` rows long, starting with `rows` of the old ones."""
        for name in ("rate_bps", "observed_at", "ingress", "transit", "live"):
            old = getattr(self, name)[rows]
            new = np.zeros(size, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def forget_before(self, cutoff: float) -> None:
        n = len(self.keys)
        gone = np.flatnonzero(self.live[:n] & (self.observed_at[:n] < cutoff))
        for r in gone.tolist():
            del self.row[self.keys[r]]  # type: ignore[arg-type]
            self.keys[r] = None
        self.live[gone] = False
        if n > MIN_ROWS and n - len(self.row) > len(self.row):
            self._compact()

    def _compact(self) -> None:
        kept = np.flatnonzero(self.live[: len(self.keys)])
        self.keys = [self.keys[r] for r in kept.tolist()]
        self.row = {key: r for r, key in enumerate(self.keys)}  # type: ignore[misc]
        self._reallocate(max(MIN_ROWS, 2 * len(kept)), kept)

    def copy(self) -> FlowFrame:
        live = np.flatnonzero(self.live[: len(self.keys)])
        keys = self.keys if len(live) == len(self.keys) else [self.keys[r] for r in live.tolist()]
        return FlowFrame(
            list(keys),  # type: ignore[arg-type]
            self.rate_bps[live],
            self.observed_at[live],
            self.ingress[live],
            self.transit[live],
        )

    def __len__(self) -> int:
        return len(self.row)
