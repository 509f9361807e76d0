"""The ECMP run as the run's control. Its routing is the hash of its flows'
5-tuples, the same in the simulator, so the two agree within a few points
wherever the machine delivers what it is asked: on Hedera's suite, 90 of 90
runs within 5 points, the largest gap 3.54. A phase whose emulated ECMP
reads further below the simulator's says the machine fell short while it
ran. The TE run, which follows it, has no fixed routing to hold against,
so a TE run starved alone goes unflagged; but of the demo's link failure
run 20 times, the four runs flagged held all three TE runs below the
floor, and the other 16 were within 4.7 points in every phase. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # records holds an EcmpControl in its report
    from emulation.scenarios.records import ModeFigures

# How far below the simulator an emulated ECMP phase may read before the
# run is called short of machine (Hedera's 90 runs: at most 3.54 apart).
AGREEMENT_POINTS = 5.0


@dataclass(frozen=True)
class PhaseControl:
    from_s: float
    to_s: float
    emulated: float  # ECMP's fraction of the optimum, as the emulation measured it
    simulated: float  # and as the simulator's fluid model gives it, for the same hash
    points: float  # emulated - simulated, in percentage points


@dataclass(frozen=True)
class EcmpControl:
    """Per phase with judged flows: ECMP emulated against ECMP simulated."""

    phases: list[PhaseControl]
    machine_short: bool  # some phase more than AGREEMENT_POINTS below the simulator


def ecmp_control(ecmp: ModeFigures, simulated: Sequence[tuple[float, float]]) -> EcmpControl | None:
    """`simulated`: per phase of the simulated run, (its start in s, ECMP's
    fraction of the optimum). None where no phase has both figures."""
    by_start = dict(simulated)
    phases = [
        PhaseControl(
            p.from_s,
            p.to_s,
            p.totals.fraction_of_optimum,
            by_start[p.from_s],
            100 * (p.totals.fraction_of_optimum - by_start[p.from_s]),
        )
        for p in ecmp.phases
        if p.totals.fraction_of_optimum is not None and p.from_s in by_start
    ]
    if not phases:
        return None
    return EcmpControl(phases, any(p.points < -AGREEMENT_POINTS for p in phases))


def control_line(control: EcmpControl) -> str:
    """The report's line for it."""
    gaps = ", ".join(f"{p.from_s:g}-{p.to_s:g} s {p.points:+.1f}" for p in control.phases)
    line = f"ECMP against the simulator, same hash (points): {gaps}"
    if control.machine_short:
        line += (
            f"; more than {AGREEMENT_POINTS:g} below it: the machine fell short in this run, "
            "so its figures may be the machine's as much as the routing's"
        )
    return line
