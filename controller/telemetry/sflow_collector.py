"""The sFlow collector: a UDP socket, bounded like the telemetry stream, in
front of the fold (sflow_fold.py) and the ingest.

One thread receives: it only checks the datagram budget (`max_per_s`) and
puts the bytes on a bounded queue; past either bound a datagram is refused
and counted, so a flood costs the queue's memory and one thread's time at
most. One worker decodes and folds; every `flush_s` it hands what the fold
reports to the ingest as one batch, as an agent's stream would. A
malformed datagram, an unknown agent or a sequence gone backwards is
counted by reason and changes nothing: nothing of it reaches the engine.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable

from controller.fabric import Fabric
from controller.metrics import Metrics
from controller.telemetry.ingest import Batch, Overloaded, TelemetryIngest
from controller.telemetry.sflow_datagram import REASONS, Malformed, decode
from controller.telemetry.sflow_fold import DATAGRAM_REFUSALS, SAMPLE_OUTCOMES, AgentPolicy, FoldConfig, SflowFold

log = logging.getLogger(__name__)

QUEUE_DATAGRAMS = 4096  # ~6 MB of 1500-byte datagrams at most
MAX_DATAGRAMS_PER_S = 20_000.0  # an emulated fabric sends hundreds; a 768-switch fabric a few thousand
FLUSH_S = 0.1  # as often as the emulation's agent reports
RECEIVE_BUFFER = 4 * 1024 * 1024
MAX_DATAGRAM = 65535


class SflowCollector:
    def __init__(
        self,
        fabric: Fabric,
        ingest: TelemetryIngest,
        metrics: Metrics,
        host: str,
        port: int,
        policy: AgentPolicy | None = None,
        config: FoldConfig | None = None,
        max_per_s: float = MAX_DATAGRAMS_PER_S,
        capacity: int = QUEUE_DATAGRAMS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.fold = SflowFold(fabric, policy or AgentPolicy(), config or FoldConfig())
        self.ingest = ingest
        self.metrics = metrics
        self.clock = clock
        self.max_per_s = max_per_s
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=capacity)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_DGRAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        self._sock.bind((host, port))
        self.address = self._sock.getsockname()[:2]
        for result in ("accepted", "rate_limited", "queue_full", *DATAGRAM_REFUSALS, *REASONS):
            metrics.sflow_datagrams.labels(result)
        for outcome in SAMPLE_OUTCOMES:
            metrics.sflow_samples.labels(outcome)
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._receive, name="sflow-receive", daemon=True),
            threading.Thread(target=self._work, name="sflow-fold", daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()
        log.info("sflow: collecting on udp %s:%d", *self.address)

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)

    def _receive(self) -> None:
        second, taken = int(time.monotonic()), 0
        datagrams = self.metrics.sflow_datagrams
        while not self._stop.is_set():
            try:
                data = self._sock.recv(MAX_DATAGRAM)
            except OSError:
                return  # closed by stop()
            now = int(time.monotonic())
            if now != second:
                second, taken = now, 0
            taken += 1
            if taken > self.max_per_s:
                datagrams.labels("rate_limited").inc()
                continue
            try:
                self._queue.put_nowait(data)
            except queue.Full:
                datagrams.labels("queue_full").inc()

    def _work(self) -> None:
        next_flush = time.monotonic() + FLUSH_S
        while True:
            try:
                data = self._queue.get(timeout=max(0.0, next_flush - time.monotonic()))
            except queue.Empty:
                pass
            else:
                if data is None:
                    return
                try:
                    self._one(data)  # an empty datagram too: it is malformed, and counted so
                except Exception:  # a bug must not end the collector: counted, logged, the next datagram goes on
                    log.exception("sflow: folding a datagram failed")
                    self.metrics.errors.labels("telemetry", "sflow_fold_failed").inc()
            if time.monotonic() >= next_flush:
                next_flush = time.monotonic() + FLUSH_S
                self._flush()

    def _one(self, data: bytes) -> None:
        m = self.metrics
        try:
            datagram = decode(data)
        except Malformed as exc:
            m.sflow_datagrams.labels(exc.reason).inc()
            return
        verdict = self.fold.accept(datagram, self.clock())
        m.sflow_datagrams.labels(verdict.refused or "accepted").inc()
        for outcome, n in verdict.samples.items():
            m.sflow_samples.labels(outcome).inc(n)
        if verdict.lost:
            m.sflow_lost.inc(verdict.lost)

    def _flush(self) -> None:
        now = self.clock()
        try:
            flows, ports, bounds = self.fold.records(now)
        except Exception:  # as in _work
            log.exception("sflow: reading the fold failed")
            self.metrics.errors.labels("telemetry", "sflow_fold_failed").inc()
            return
        self.metrics.sflow_flows.set(self.fold.flow_count)
        for bound in bounds:
            self.metrics.sflow_error_bound.observe(bound)
        batch = Batch(ports=tuple(ports), flows=tuple(flows))
        if not batch:
            return
        with contextlib.suppress(Overloaded):  # counted by the ingest; the next flush carries newer estimates
            self.ingest.submit(batch)
