"""What a scenario run is judged against, and how. Pure (the optimum's LPs included).

- Phases: the run splits at each failure and repair, and wherever a flow
  starts or stops; each phase has its own exact optimum, of the flows sending
  in it with what is down in it: max-min fair,
  splittable (emulation/model/optimum.py, the bound no routing beats), the
  single-path optimum beside it when it is known, and the throughput bound.
- Goodput: each flow's receiver intervals (1 s) within the planned duration
  only. iperf3 is stopped at the planned end; intervals after it are zeros
  written while it waits to finish. The first interval (slow start) is left
  out, as before.
- Each measured interval is judged against the optimum of the phase it lies
  in (overlap-weighted where it straddles an event), so a flow's figure and
  the run's aggregate are against the optimum of the same seconds.
- Fractions of the optimum credit each flow up to its own optimum rate:
  TCP is not max-min fair, and an unfair share of the same links can add
  up to more than the max-min optimum's aggregate (up to the throughput
  bound). Credited so, 100% is a true ceiling; the aggregate's own ratio
  is `aggregate_over_optimum`.
- An aggregate above the throughput bound fails the run (`OptimumExceeded`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from controller.errors import RailyardError
from controller.fabric import Fabric
from emulation.model.optimum import Bounds, ModelFlow, OptimumKind, Outage, Units, optimum_bounds
from emulation.scenarios.records import ModeFigures, PhaseFigures, ScenarioReport, Totals
from emulation.traffic.iperf import FlowResult, FlowSpec
from emulation.workload.model import Event

# How far a measured aggregate may sit above the bound before it is a bug.
# Goodput counts payload: at MTU 9000 the TCP/IP and Ethernet headers take
# 0.7% of what HTB shapes, so a saturated link reads 0.993 of capacity. HTB's
# burst (2 ms at line rate, emulation/net/links.py) lets a 1 s interval run
# at most 0.2% over. A receiver that reads its socket late moves bytes from
# one interval to the next, which cancels over a phase except at its edges.
# 1% covers those with margin; a wrong optimum (the greedy one was 14-18%
# under) shows far beyond it.
TOLERANCE = 0.01

OPTIMUM_NOTE = (
    "exact (HiGHS LP) max-min fair rates with the routing chosen by the optimiser and flows free to split over "
    "their equal-cost paths, failure-aware (links down in each phase carry nothing): no routing, per-flow TE or "
    "packet spraying, beats it in the max-min order. Single-path: the same with one path per flow (per-flow TE's "
    "best), when known."
)


class RunInvalid(RailyardError):
    """A run whose figures are not what they claim to be. `report` carries
    the figures that show it, for whoever writes them down."""

    report: ScenarioReport | None = None


class OptimumExceeded(RunInvalid):
    """Goodput above the bound: the optimum or the measurement is wrong."""


class ControllerFailed(RunInvalid):
    """The controller's reconcile passes failed during a TE run: what was
    measured is not what TE would have done."""


@dataclass(frozen=True)
class Phase:
    start_s: float
    end_s: float
    dead_links: tuple[str, ...]
    bounds: Bounds
    dead_switches: tuple[str, ...] = ()

    @property
    def outage(self) -> Outage:
        return Outage.of(self.dead_links, self.dead_switches)

    def overlap(self, t0: float, t1: float) -> float:
        return max(0.0, min(t1, self.end_s) - max(t0, self.start_s))


def model_flows(flows: Sequence[FlowSpec]) -> list[ModelFlow]:
    """UDP flows send at their rate; TCP is elastic."""
    return [ModelFlow(f.src, f.dst, f.rate_bps if f.protocol == "udp" else math.inf) for f in flows]


def outages(events: Sequence[Event], duration_s: float) -> list[tuple[float, float, tuple[str, ...], tuple[str, ...]]]:
    """(start, end, dead links, dead switches) of each stretch between the
    events that fail or restore something (drains are the controller's
    choice: the optimum may still use a drained link, so it stays a bound)."""
    cuts = [0.0]
    dead: list[tuple[tuple[str, ...], tuple[str, ...]]] = [((), ())]
    links: set[str] = set()
    switches: set[str] = set()
    for e in events:
        if e.kind not in ("link_down", "link_up", "switch_down", "switch_up"):
            continue
        target = links if e.kind.startswith("link_") else switches
        (target.add if e.kind.endswith("_down") else target.discard)(e.target)
        if e.at_s == cuts[-1]:
            dead[-1] = (tuple(sorted(links)), tuple(sorted(switches)))
        else:
            cuts.append(e.at_s)
            dead.append((tuple(sorted(links)), tuple(sorted(switches))))
    return [(a, b, *d) for (a, b), d in zip(itertools.pairwise([*cuts, duration_s]), dead)]


def phases(fabric: Fabric, events: Sequence[Event], duration_s: float, flows: Sequence[FlowSpec]) -> list[Phase]:
    """The run cut at each failure or repair and wherever a flow starts or
    stops, with the optimum of each piece (emulated units). A flow outside its
    window asks for nothing there: counted as sending, it would lower the
    others' optimum below what they can have."""
    model = model_flows(flows)
    out = []
    edges = {f.start_s for f in flows} | {f.end_s(duration_s) for f in flows}
    for start, end, links, switches in outages(events, duration_s):
        cuts = sorted({start, end} | {t for t in edges if start < t < end})
        for a, b in itertools.pairwise(cuts):
            active = [
                m if f.start_s <= a and f.end_s(duration_s) >= b else replace(m, demand_bps=0.0)
                for f, m in zip(flows, model)
            ]
            bounds = optimum_bounds(fabric, active, units=Units.EMULATED, outage=Outage.of(links, switches))
            out.append(Phase(a, b, links, bounds, switches))
    return out


def planned_intervals(result: FlowResult, duration_s: float) -> tuple[float, ...]:
    """The receiver's intervals within the planned window (the client ran
    `-t stop - start`); later ones are iperf3 waiting to finish."""
    return result.interval_bps[: max(int(result.flow.end_s(duration_s) - result.flow.start_s + 1e-9), 0)]


def measured(result: FlowResult, duration_s: float) -> list[tuple[float, float, float]]:
    """(start, end, bps) of the intervals a flow is judged on: the planned
    duration, minus a TCP flow's first second (slow start) when there is
    more. A UDP flow keeps its first second: its receiver, busy at the start,
    reads the backlog in the seconds after, and judging those without the
    short first one would credit it with more than its link carried."""
    intervals = planned_intervals(result, duration_s)
    first = 1 if len(intervals) > 1 and result.flow.protocol != "udp" else 0
    t0 = result.flow.start_s
    return [(t0 + k, t0 + k + 1.0, bps) for k, bps in enumerate(intervals) if k >= first]


def _optimum_over(phases_: Sequence[Phase], flow: int, t0: float, t1: float, kind: OptimumKind) -> float | None:
    total = 0.0
    for p in phases_:
        share = p.overlap(t0, t1)
        if share <= 0:
            continue
        best = p.bounds.splittable if kind is OptimumKind.SPLITTABLE else p.bounds.single_path
        if best is None:
            return None
        total += share * best.rates_bps[flow]
    return total / (t1 - t0)


@dataclass(frozen=True)
class JudgedFlow:
    goodput_bps: float
    optimum_bps: float
    single_path_bps: float | None
    intervals: int  # the seconds judged


@dataclass(frozen=True)
class Judged:
    flows: list[JudgedFlow]
    totals: Totals
    phases: list[PhaseFigures]


def judge(phases_: Sequence[Phase], results: Sequence[FlowResult], duration_s: float) -> Judged:
    """Per flow, per phase and for the run: goodput, optimum, fractions."""
    flows = []
    # Per phase, per flow measured in it: (goodput, optimum, single-path optimum) means.
    rows: list[list[tuple[float, float, float | None]]] = [[] for _ in phases_]
    for i, r in enumerate(results):
        seconds = measured(r, duration_s)
        judged = [
            (
                bps,
                _optimum_over(phases_, i, a, b, OptimumKind.SPLITTABLE) or 0.0,
                _optimum_over(phases_, i, a, b, OptimumKind.SINGLE_PATH),
            )
            for a, b, bps in seconds
        ]
        flows.append(JudgedFlow(*_means(judged), len(seconds)))
        for k, p in enumerate(phases_):
            inside = [j for (a, b, _), j in zip(seconds, judged) if p.start_s <= a and b <= p.end_s]
            if inside:
                rows[k].append(_means(inside))
    phase_figures = [
        PhaseFigures(p.start_s, p.end_s, list(p.dead_links), _totals(phase_rows), len(phase_rows), _ceiling(p))
        for p, phase_rows in zip(phases_, rows)
    ]
    return Judged(flows, _totals([(f.goodput_bps, f.optimum_bps, f.single_path_bps) for f in flows]), phase_figures)


def _means(judged: Sequence[tuple[float, float, float | None]]) -> tuple[float, float, float | None]:
    if not judged:
        return 0.0, 0.0, None
    n = len(judged)
    singles = [s for _, _, s in judged]
    single = None if any(s is None for s in singles) else sum(s for s in singles if s is not None) / n
    return sum(g for g, _, _ in judged) / n, sum(o for _, o, _ in judged) / n, single


def _totals(rows: Sequence[tuple[float, float, float | None]]) -> Totals:
    goodput = sum(g for g, _, _ in rows)
    optimum = sum(o for _, o, _ in rows)
    credited = sum(min(g, o) for g, o, _ in rows)
    singles = [s for _, _, s in rows]
    single = None if any(s is None for s in singles) else sum(s for s in singles if s is not None)
    return Totals(
        aggregate_mbps=goodput / 1e6,
        optimum_mbps=optimum / 1e6,
        fraction_of_optimum=credited / optimum if optimum else None,
        aggregate_over_optimum=goodput / optimum if optimum else None,
        single_path_mbps=None if single is None else single / 1e6,
        fraction_of_single_path=goodput / single if single else None,
    )


def _ceiling(p: Phase) -> float:
    """The throughput bound over the max-min optimum's aggregate (>= 1). A
    max-min allocation may leave capacity that an unfair one (TCP is not
    max-min) uses: a flow crossing two bottlenecks holds back others on
    both. Where the two are equal (every shipped scenario), 100% of the
    optimum is the ceiling itself."""
    full = p.bounds.splittable.aggregate_bps
    return p.bounds.throughput_bps / full if full else 1.0


def check(mode: str, figures: ModeFigures) -> None:
    """Raises OptimumExceeded when the run's or a phase's goodput is above
    what no routing can carry (the optimum, or the throughput bound where
    that is higher), or an iteration is faster than its job's optimum,
    beyond the measurement tolerance."""
    for job in figures.jobs:
        fastest = job.slowdown_vs_optimum.min
        if fastest is not None and fastest < 1 - TOLERANCE:
            raise OptimumExceeded(
                f"{mode} run, job {job.job}: an iteration took {fastest:.1%} of its optimum iteration time, "
                f"more than the {TOLERANCE:.0%} measurement tolerance below what no routing can beat: a bug in "
                "the optimum or in the measurement, not a result"
            )
    phases_ = figures.phases
    judged = [(p.where, p.totals, p.bound_over_optimum) for p in phases_]
    judged.append(("the whole run", figures.totals, max((p.bound_over_optimum for p in phases_), default=1.0)))
    for where, totals, ceiling in judged:
        if totals.aggregate_over_optimum is not None and totals.aggregate_over_optimum > ceiling * (1 + TOLERANCE):
            bound = "" if ceiling <= 1 + 1e-6 else f"; throughput bound {ceiling:.1%} of it"
            raise OptimumExceeded(
                f"{mode} run, {where}: aggregate goodput {totals.aggregate_mbps:.2f} Mb/s is "
                f"{totals.aggregate_over_optimum:.1%} of the exact {OptimumKind.SPLITTABLE.value} optimum's "
                f"aggregate ({totals.optimum_mbps:.2f} Mb/s{bound}), more than the {TOLERANCE:.0%} measurement "
                "tolerance above what no routing can carry: a bug in the optimum or in the measurement, not a result"
            )
