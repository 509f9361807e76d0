"""How flows share the links they cross, in the fluid model: a choice the
simulator makes for every arm alike. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

import numpy as np
import scipy.sparse as sp

from emulation.model.fluid import max_min_rates
from emulation.model.proportional import proportional_fair_rates


class Sharing(StrEnum):
    # What TCP's congestion control converges to (proportional.py): the simulator's default.
    PROPORTIONAL = "proportional"
    # The definition every optimum uses; a flow crossing two full links gets what a flow with one does.
    MAX_MIN = "max-min"

    def rates(
        self, shares: sp.spmatrix, capacity: np.ndarray, demand: np.ndarray | Sequence[float] | None = None
    ) -> np.ndarray:
        solve = proportional_fair_rates if self is Sharing.PROPORTIONAL else max_min_rates
        return solve(shares, capacity, demand)
