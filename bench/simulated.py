"""A workload on a shipped spec through the flow-level simulator, with a
progress line: what the simulator benchmarks share."""

from __future__ import annotations

import gc
import time

from controller.fabric import load_fabric
from controller.fabric.spec import SPECS_DIR
from emulation.simulate.records import SimulationReport
from emulation.simulate.run import simulate
from emulation.workload import Workload


def simulated(
    fabric_name: str, workload: Workload, seed: int, duration_s: float | None
) -> tuple[SimulationReport, float]:
    """(the simulator's result, the seconds building and warming the fabric took)."""
    started = time.perf_counter()
    fabric = load_fabric(SPECS_DIR / f"{fabric_name}.yaml")
    fabric.warm()
    build_s = time.perf_counter() - started
    gc.freeze()  # the fabric's objects are here to stay: keep them out of every collection

    def progress(t: float, total: float, cycle) -> None:
        line = f"\r  {fabric_name} {workload.name}: {t:6.1f}/{total:g} s, step {cycle.step_s * 1e3:6.0f} ms "
        print(line, end="", flush=True)

    result = simulate(fabric, workload, seed, duration_s, progress)
    print()
    return result, build_s
