"""The adaptive TE engine (pure): an `Engine` per runner takes telemetry
and the engine's state at an explicit time (a `Snapshot`) and returns the
new state and its decisions. How a cycle runs is in `cycle`; elephants and
demand, rebalancing (single moves, then joint plans) and incast metering
each have their own module; `frames` is telemetry as columns."""

from controller.te.engine.cycle import Engine, EngineCaches, Snapshot, path_changed
from controller.te.engine.frames import FlowFrame, PortFrame
from controller.te.engine.state import Decision, DecisionKind, EngineConfig, Meter, Move, PathChanges, TeState

__all__ = [
    "Decision",
    "DecisionKind",
    "Engine",
    "EngineCaches",
    "EngineConfig",
    "FlowFrame",
    "Meter",
    "Move",
    "PathChanges",
    "PortFrame",
    "Snapshot",
    "TeState",
    "path_changed",
]
