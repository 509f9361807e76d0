"""The adaptive TE engine (pure): `step` takes telemetry and the engine's
state at an explicit time and returns the new state and its decisions. How a
cycle runs is in `cycle`; elephants and demand, rebalancing and incast
metering each have their own module."""

from controller.te.engine.cycle import step
from controller.te.engine.elephants import estimate_demands, find_elephants
from controller.te.engine.state import Decision, DecisionKind, Elephant, EngineConfig, Meter, Move, TeState

__all__ = [
    "Decision",
    "DecisionKind",
    "Elephant",
    "EngineConfig",
    "Meter",
    "Move",
    "TeState",
    "estimate_demands",
    "find_elephants",
    "step",
]
