"""Stands in for the TE runner (controller/runtime/te_runner.py) in reconciler
tests: a fixed plan of elephant moves and incast meters."""

from __future__ import annotations

from collections.abc import Mapping

from controller.southbound.overlay import OverlayEntry, OverlayMeter
from controller.te.engine import Meter, Move


class StaticTe:
    def __init__(self, moves: list[Move] | None = None, meters: list[Meter] | None = None) -> None:
        self.generation = 1  # bump it when changing the plan, as the runner does
        self.moves = moves or []
        self.meters = meters or []
        self.adopted: list[OverlayEntry] = []
        self.applied_generation = 0

    def plan(self) -> tuple[int, list[Move], list[Meter]]:
        return self.generation, list(self.moves), list(self.meters)

    def adopt(self, entries: list[OverlayEntry], meters: Mapping[int, OverlayMeter]) -> None:
        self.adopted += entries

    def applied(self, generation: int) -> None:
        self.applied_generation = generation
