"""The adaptive TE engine (pure): `step` takes telemetry and the engine's
state at an explicit time and returns the new state and its decisions. How a
cycle runs is in `cycle`; elephants and demand, rebalancing and incast
metering each have their own module; `frames` is telemetry as columns."""

from controller.te.engine.cycle import step
from controller.te.engine.frames import FlowFrame, PortFrame
from controller.te.engine.state import Decision, DecisionKind, EngineConfig, Meter, Move, TeState

__all__ = [
    "Decision",
    "DecisionKind",
    "EngineConfig",
    "FlowFrame",
    "Meter",
    "Move",
    "PortFrame",
    "TeState",
    "step",
]
