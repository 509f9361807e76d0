"""The fluid model over time: which flows send, how many bytes each still has
to move, and when bursts and iterations end. Pure: the caller gives the
times and, per stretch of fixed routing, the rates of any set of demands.

- An unbounded flow sends through its window (on/off periods too).
- A flow with bytes sends them from each burst's start (its window's start,
  then every `every_s`) and ends when they are through. Its bursts go one
  after another, as the emulation's sender sends them: one still sending
  when the next opens delays that one, which is timed from its own opening.
- A job with iterations runs bulk-synchronously: at an iteration's start
  every flow of its collective gets `flow_bytes` to move; the iteration ends
  when the last of them is through; the next starts `compute_gap_s` later.
  A flow that is done, or off, demands nothing: its capacity goes to the rest.

Rates are the max-min fluid model's, re-solved from one event to the next:
a window edge, an iteration start, a change of routing (the caller's
stretches) and every flow completion. Completions are coalesced at
`resolve_s`: a step lasts at least that long (unless another event comes
first), every flow finishing inside it ends at its exact time, and the
capacity it frees is handed out at the step's end. The error this makes in
an iteration time is below `resolve_s` per coalesced completion on its
critical path; `resolve_s` = 0 is exact event-to-event.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from emulation.simulate.traffic import SimFlow, demands
from emulation.workload.expand import JobPlan

Solve = Callable[[np.ndarray], np.ndarray]  # per-flow demands (bps) -> max-min rates (bps)

EPS_S = 1e-9
_ON, _OFF, _ITERATION = 0, 1, 2  # schedule entries: a burst starts, a window closes, a job iterates


@dataclass(frozen=True)
class Iteration:
    job: str
    index: int
    start_s: float
    end_s: float

    @property
    def time_s(self) -> float:
        """From its start to its last flow's last byte (the compute gap after it is not part of it)."""
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Burst:
    """One burst of a finite flow outside a job: end None when the run ended first."""

    flow: int
    start_s: float
    end_s: float | None


class Timeline:
    def __init__(self, flows: Sequence[SimFlow], jobs: Sequence[JobPlan], duration_s: float, resolve_s: float) -> None:
        n = len(flows)
        self.t = 0.0
        self.duration_s = duration_s
        self.resolve_s = resolve_s
        self.cap = demands(flows)
        self.bits = np.fromiter((f.bytes * 8.0 for f in flows), dtype=float, count=n)
        self.finite = self.bits > 0
        self.left = np.zeros(n)  # bits still to move in the current burst or iteration
        self.on = np.zeros(n, dtype=bool)
        self.moved = np.zeros(n)  # bits moved since the caller last took them
        self.burst_start = np.zeros(n)
        self.queued: dict[int, deque[float]] = {}  # a finite flow's bursts waiting for the one it sends: their openings
        self.iterations: list[Iteration] = []
        self.bursts: list[Burst] = []
        self._schedule: list[tuple[float, int, int, int]] = []
        self._seq = 0
        iterating = [j for j in jobs if j.iterations and j.transfers]
        self.jobs = iterating
        self.job_of = np.full(n, -1, dtype=np.int64)
        for j, job in enumerate(iterating):
            self.job_of[list(job.transfers)] = j
            self._push(job.start_s, _ITERATION, j)
        self.job_left = np.zeros(len(iterating), dtype=np.int64)
        self.job_done = np.zeros(len(iterating), dtype=np.int64)  # iterations finished
        self.job_start = np.zeros(len(iterating))
        self.job_end = np.zeros(len(iterating))  # the latest completion in the running iteration
        for i, f in enumerate(flows):
            if self.job_of[i] >= 0:
                continue
            for start, stop in f.window.bursts(duration_s):
                self._push(start, _ON, i)
                if stop < duration_s:
                    self._push(stop, _OFF, i)
        self._last: tuple[Solve, bytes, np.ndarray] | None = None

    def _push(self, at: float, kind: int, index: int) -> None:
        if at < self.duration_s:
            # Closing before opening at the same instant: a burst that ends
            # where the next begins is off for no time at all.
            heapq.heappush(self._schedule, (at, 0 if kind == _OFF else 1, self._seq, kind * (1 << 40) + index))
            self._seq += 1

    def fire(self) -> None:
        """Everything scheduled up to now."""
        while self._schedule and self._schedule[0][0] <= self.t + EPS_S:
            at, _, _, code = heapq.heappop(self._schedule)
            kind, i = divmod(code, 1 << 40)
            if kind == _ITERATION:
                members = list(self.jobs[i].transfers)
                self.left[members] = self.bits[members]
                self.on[members] = True
                self.job_left[i] = len(members)
                self.job_start[i] = at
                self.job_end[i] = at
            elif kind == _ON:
                if self.finite[i] and self.on[i] and self.left[i] > 0:
                    self.queued.setdefault(i, deque()).append(at)  # waits for the burst it sends
                    continue
                self.on[i] = True
                self.left[i] = self.bits[i]
                self.burst_start[i] = at
            elif not self.finite[i]:  # a finite flow's burst ends with its last byte, not with its window
                self.on[i] = False

    def demand(self) -> np.ndarray:
        return np.where(self.on, self.cap, 0.0)

    def rates(self, solve: Solve) -> np.ndarray:
        """The rates now, under `solve` (memoised: the same routing and demands give the same rates)."""
        demand = self.demand()
        key = demand.tobytes()
        if self._last is not None and self._last[0] is solve and self._last[1] == key:
            return self._last[2]
        rates = solve(demand)
        self._last = (solve, key, rates)
        return rates

    def next_event(self) -> float:
        return self._schedule[0][0] if self._schedule else math.inf

    def advance(self, until: float, solve: Solve) -> None:
        """Move the fluid from now to `until` with the routing `solve` stands for."""
        until = min(until, self.duration_s)
        while self.t < until - EPS_S:
            self.fire()
            rates = self.rates(solve)
            running = self.on & self.finite & (rates > 0)
            finish = np.full(len(rates), math.inf)
            finish[running] = self.left[running] / rates[running]
            soonest = self.t + float(finish.min()) if running.any() else math.inf
            end = min(until, self.next_event(), max(soonest, self.t + self.resolve_s))
            dt = end - self.t
            sent = np.where(self.on, rates * dt, 0.0)
            done = running & (finish <= dt + EPS_S)
            sent = np.where(self.finite, np.minimum(sent, self.left), sent)
            self.moved += sent
            self.left -= np.where(self.finite, sent, 0.0)
            if done.any():
                self._complete(np.flatnonzero(done), self.t + finish[done])
            self.t = end
        self.t = max(self.t, until)

    def _complete(self, flows: np.ndarray, at: np.ndarray) -> None:
        self.on[flows] = False
        self.left[flows] = 0.0
        for i, t in zip(flows.tolist(), at.tolist()):
            j = int(self.job_of[i])
            if j < 0:
                self.bursts.append(Burst(i, float(self.burst_start[i]), t))
                if self.queued.get(i):  # the next burst starts now, timed from its own opening
                    self.on[i] = True
                    self.left[i] = self.bits[i]
                    self.burst_start[i] = self.queued[i].popleft()
                continue
            self.job_end[j] = max(self.job_end[j], t)
            self.job_left[j] -= 1
            if self.job_left[j] == 0:
                job = self.jobs[j]
                self.iterations.append(
                    Iteration(job.job_id, int(self.job_done[j]), float(self.job_start[j]), float(self.job_end[j]))
                )
                self.job_done[j] += 1
                if self.job_done[j] < job.iterations:
                    self._push(float(self.job_end[j]) + job.compute_gap_s, _ITERATION, j)

    def unfinished(self) -> list[Iteration]:
        """The iterations still running now, each ending (for now) at this instant."""
        return [
            Iteration(job.job_id, int(self.job_done[j]), float(self.job_start[j]), self.t)
            for j, job in enumerate(self.jobs)
            if self.job_left[j] > 0
        ]

    def unfinished_bursts(self) -> list[Burst]:
        """The bursts still sending or waiting now: the run ended before their last byte."""
        sending = [
            Burst(i, float(self.burst_start[i]), None)
            for i in np.flatnonzero(self.on & self.finite).tolist()
            if self.job_of[i] < 0
        ]
        waiting = [Burst(i, start, None) for i, starts in self.queued.items() for start in starts]
        return sending + waiting

    def take_moved(self) -> np.ndarray:
        """Bits each flow moved since the last call (the byte counters' delta, in bits)."""
        moved, self.moved = self.moved, np.zeros_like(self.moved)
        return moved
