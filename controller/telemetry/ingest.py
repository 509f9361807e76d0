"""Telemetry ingest: a bounded queue between the API and the link view.

The API thread validates and enqueues; one worker applies batches to the
LinkView under a lock (and, once TE asks, to the same view kept as its
frames: te/columns.py). A full queue refuses the batch (the API answers
RESOURCE_EXHAUSTED and counts it), so a flood of telemetry costs at most the
queue's bounded memory and never delays placement.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from controller.errors import Exhausted
from controller.fabric import Endpoint
from controller.metrics import Metrics
from controller.te.columns import FlowColumns, PortColumns
from controller.te.engine.frames import FlowFrame, PortFrame
from controller.te.view import FlowKey, FlowSample, LinkView, PathSample, PortSample
from controller.telemetry.priority import ApiFirst

log = logging.getLogger(__name__)

QUEUE_BATCHES = 256
FORGET_AFTER_S = 60.0
# Measured load is smoothed (EWMA) and good for 2 s: a copy this old changes
# nothing. The ingest thread makes it as batches land, off the API's path,
# once the last copy is LOAD_REFRESH_S old; a placement takes a copy up to
# LOAD_USABLE_S old. With one limit for both, a placement that came after
# the copy aged out and before the next batch made the copy itself (5-12 ms
# of CPU on ft2-16k, with the index of it): 4% of a soak's placements, the
# slowest of each minute (docs/benchmarks.md).
LOAD_REFRESH_S = 0.5
LOAD_USABLE_S = 1.0
SWEEP_INTERVAL_S = 5.0


@dataclass(frozen=True)
class Batch:
    ports: tuple[tuple[Endpoint, PortSample], ...] = ()
    paths: tuple[tuple[tuple[str, str, str], PathSample], ...] = ()
    flows: tuple[tuple[FlowKey, FlowSample], ...] = ()

    def __len__(self) -> int:
        return len(self.ports) + len(self.paths) + len(self.flows)


class Overloaded(Exhausted):
    """The ingest queue is full: the agent backs off and reconnects."""


class TelemetryIngest:
    def __init__(self, metrics: Metrics, clock: Callable[[], float] = time.time, capacity: int = QUEUE_BATCHES) -> None:
        self.metrics = metrics
        self.clock = clock
        self.view = LinkView()
        self._lock = threading.Lock()
        self._queue: queue.Queue[Batch | None] = queue.Queue(maxsize=capacity)
        self._thread = threading.Thread(target=self._run, name="telemetry", daemon=True)
        self._last_sweep = 0.0
        self._load: tuple[float, dict[Endpoint, float]] | None = None
        self._load_listeners: list[Callable[[dict[Endpoint, float]], None]] = []
        self.arrived = threading.Event()  # set after each batch is in the view: TE runs on fresh data
        # API calls go first: telemetry work, and the TE cycles it drives, wait for them (priority.py).
        self.priority = ApiFirst()
        self._columns: tuple[FlowColumns, PortColumns] | None = None  # what TE reads, once it asks (keep_columns)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)

    def submit(self, batch: Batch) -> None:
        try:
            self._queue.put_nowait(batch)
        except queue.Full:
            self.metrics.telemetry_records.labels("dropped").inc(len(batch))
            raise Overloaded(f"telemetry queue full ({self._queue.maxsize} batches); retry with backoff") from None

    def _run(self) -> None:
        while True:
            batch = self._queue.get()
            if batch is None:
                return
            self.priority.yield_to_api()
            with self._lock:
                self._observe(batch)
                now = self.clock()
                if now - self._last_sweep > SWEEP_INTERVAL_S:
                    self._forget_before(now - FORGET_AFTER_S)
                    self._last_sweep = now
                load = self.view.fresh_load(now) if self._copy_within(now, LOAD_REFRESH_S) is None else None
            self.metrics.telemetry_records.labels("accepted").inc(len(batch))
            if load is not None:
                self._publish(now, load)
            self.arrived.set()

    def _publish(self, now: float, load: dict[Endpoint, float]) -> None:
        """The listeners see a new copy before placements do: a placement
        finds it indexed (LoadLedger keeps the last two indexes, for one
        that is still reading the copy before)."""
        for listener in self._load_listeners:
            listener(load)
        self._load = (now, load)

    def _observe(self, batch: Batch) -> None:
        view = self.view
        for egress, port_sample in batch.ports:
            view.observe_port(egress, port_sample)
        for path_key, path_sample in batch.paths:
            view.observe_path(path_key, path_sample)
        for flow_key, flow_sample in batch.flows:
            view.observe_flow(flow_key, flow_sample)
        self._keep([egress for egress, _ in batch.ports], [key for key, _ in batch.flows])

    def _keep(self, egresses: Iterable[Endpoint], flow_keys: Iterable[FlowKey]) -> None:
        """The columns, if kept, as the view now holds these ports and flows (smoothed, the newest kept)."""
        if self._columns is None:
            return
        flows, ports = self._columns
        for egress in egresses:
            ports.observe(egress, self.view.ports[egress])
        for flow_key in flow_keys:
            flows.observe(flow_key, self.view.flows[flow_key])

    def _forget_before(self, cutoff: float) -> None:
        self.view.forget_before(cutoff)
        if self._columns is not None:
            for columns in self._columns:
                columns.forget_before(cutoff)

    def keep_columns(self, egress_ids: Mapping[Endpoint, int]) -> None:
        """From now on, also keep the view as TE's frames, laid out by
        `egress_ids` (its engine's LinkIndex.ids): `frames()` then hands a
        cycle copies of arrays instead of dictionaries to convert."""
        with self._lock:
            self._columns = FlowColumns(egress_ids), PortColumns(egress_ids)
            self._keep(self.view.ports, self.view.flows)

    def frames(self) -> tuple[FlowFrame, PortFrame] | None:
        """The view as TE's frames (copies), if keep_columns was asked for."""
        with self._lock:
            if self._columns is None:
                return None
            flows, ports = self._columns
            return flows.copy(), ports.copy()

    def _copy_within(self, now: float, age_s: float) -> dict[Endpoint, float] | None:
        """The last copy of the measured load, unless it is `age_s` old (no lock: one read)."""
        cached = self._load
        return cached[1] if cached is not None and 0 <= now - cached[0] < age_s else None

    def on_load(self, listener: Callable[[dict[Endpoint, float]], None]) -> None:
        """`listener(load)` on the ingest thread with each new copy of the
        measured load (placement's own index of it is made there, not in a
        PlaceJob)."""
        self._load_listeners.append(listener)

    def snapshot(self) -> tuple[dict[FlowKey, FlowSample], dict[Endpoint, PortSample]]:
        """Every flow and port sample, with its time: the TE engine judges staleness itself."""
        with self._lock:
            return dict(self.view.flows), dict(self.view.ports)

    def fresh_load(self) -> dict[Endpoint, float]:
        """The measured load placement reads: the ingest thread's copy, at
        most LOAD_USABLE_S old while telemetry flows, so a placement does
        not copy every port's rate (thousands at 16k GPUs) under the view's
        lock. Once telemetry stops, the placement copies what is left fresh.
        Not to be changed by the caller."""
        now = self.clock()
        load = self._copy_within(now, LOAD_USABLE_S)
        if load is None:
            with self._lock:
                load = self._copy_within(now, LOAD_USABLE_S)
                if load is None:
                    load = self.view.fresh_load(now)
                    self._load = (now, load)
        return load

    def fresh_ports(self) -> dict[Endpoint, PortSample]:
        with self._lock:
            return self.view.fresh_ports(self.clock())
