"""Searches that found nothing are not repeated: the joint search's inputs
(routes, flows, what may move, their caps, dead links) as a fingerprint,
and how often that fingerprint was searched in vain (state.Fruitless).
Without it a search that cannot succeed would run every cycle, and a
background that drifts within noise would make every cycle look new. Pure.
"""

from __future__ import annotations

import numpy as np

from controller.te.engine.state import EngineConfig, Fruitless

SEARCHES = 3  # searches of the same inputs, hysteresis_s apart, before they are left alone


def alike_within(cfg: EngineConfig, capacity: np.ndarray) -> float:
    """min_gain of the narrowest link: measurements closer than this are alike."""
    return cfg.min_gain * float(capacity[np.isfinite(capacity)].min())


def fingerprint(
    rows: np.ndarray, cats: np.ndarray, free: np.ndarray, caps: np.ndarray, dead: np.ndarray, step: float
) -> int:
    """What the joint search works on but the background: the routes, the
    flows, what may move, the caps in steps of `step`, the dead links."""
    quantized = np.round(np.where(np.isfinite(caps), caps, -1.0) / step)
    return hash((rows.tobytes(), cats.tobytes(), free.tobytes(), quantized.tobytes(), dead.tobytes()))


def searched_before(
    last: Fruitless | None, key: int, background: np.ndarray, now: float, cfg: EngineConfig, step: float
) -> int:
    """How often these inputs were searched and nothing found (0: new);
    -1: leave them alone now (searched under hysteresis_s ago, or SEARCHES
    times with the background as it is, within `step`)."""
    if last is None or last.key != key or len(last.background) != len(background):
        return 0
    if now - last.at < cfg.hysteresis_s:
        return -1
    if np.abs(last.background - background).max(initial=0.0) > step:
        return 0
    return -1 if last.searches >= SEARCHES else last.searches
