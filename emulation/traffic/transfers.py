"""Finite transfers, bursts and bulk-synchronous iterations on persistent
connections, timed from the traffic itself.

iperf3 starts a process, a control connection and a slow start per test:
tens of milliseconds, too much against a 1-3 s iteration. Here one process
holds a connection per flow, opened before the run in the servers'
namespaces (netns.socket_in), and a thread per end:

- a sender writes its bytes when its window opens, or when its job's
  iteration is released; it stamps when it began writing;
- a receiver counts what arrives and stamps, per burst, the first and the
  last byte: a burst ends when its last byte is read, not when it was sent;
- a job's coordinator releases every flow of an iteration at once, waits
  for the last flow's last byte, sleeps the compute gap, releases the next.

The method's overhead is measured, not assumed: per iteration, the longest
delay from the release to a sender writing (`dispatch_s`). UDP carries a
(burst, sequence) header so a burst's loss and end are known.
"""

from __future__ import annotations

import contextlib
import math
import queue
import socket
import struct
import threading
import time
from collections.abc import Sequence

from controller.errors import HostError
from emulation.net.netns import socket_in
from emulation.traffic.iperf import TCP_CONGESTION, UDP_PAYLOAD_BYTES
from emulation.traffic.records import Burst, Iteration, Schedule, Stream, StreamResult

CHUNK_BYTES = 256 * 1024
WARM_UP_BYTES = 1024 * 1024  # per TCP connection: enough to leave slow start at emulated rates
_HEADER = struct.Struct("!II")  # UDP: burst, sequence
PACING_TICK_S = 0.005


class TransferError(HostError):
    """A flow's connection could not be set up (named, in one line)."""


class TransferEngine:
    def __init__(self, streams: Sequence[Stream], jobs: Sequence[Schedule], duration_s: float, grace_s: float = 5.0):
        self.results = [StreamResult(s) for s in streams]
        self.jobs = list(jobs)
        self.duration_s = duration_s
        self.grace_s = grace_s
        self.iterations: list[Iteration] = []
        self._senders: list[socket.socket] = []
        self._receivers: list[socket.socket] = []
        self._releases: list[queue.Queue[int | None]] = [queue.Queue() for _ in streams]
        self._done = threading.Condition()
        self._workers: list[threading.Thread] = []  # senders and coordinators: the run is over when they are
        self._readers: list[threading.Thread] = []
        self._t0 = 0.0
        self._closing = threading.Event()

    # --- set-up -------------------------------------------------------------
    def open(self) -> TransferEngine:
        """Every connection made (TCP) or bound (UDP) before the clock starts.
        A failure closes what was opened and names the flow."""
        try:
            for r in self.results:
                self._connect(r.stream)
        except OSError as exc:
            self._close_sockets()
            raise TransferError(f"flow {r.stream.name}: cannot set it up: {exc}") from exc
        self._warm_up()
        return self

    def _warm_up(self) -> None:
        """Every TCP connection moves WARM_UP_BYTES, all at once, before the
        clock starts, as NCCL-tests run warm-up iterations before timing any:
        a fresh connection's slow start (and the losses it ends in) would
        otherwise land on the first iteration alone."""
        tcp = [i for i, r in enumerate(self.results) if r.stream.protocol == "tcp"]
        failed: list[str] = []

        def send(i: int) -> None:
            try:
                self._senders[i].sendall(bytes(WARM_UP_BYTES))
            except OSError as exc:
                failed.append(f"flow {self.results[i].stream.name}: warming up: {exc}")

        def receive(i: int) -> None:
            buf, left = bytearray(CHUNK_BYTES), WARM_UP_BYTES
            try:
                self._receivers[i].settimeout(30.0)
                while left > 0:
                    n = self._receivers[i].recv_into(buf, min(left, CHUNK_BYTES))
                    if not n:
                        raise OSError("closed")
                    left -= n
                self._receivers[i].settimeout(None)
            except OSError as exc:
                failed.append(f"flow {self.results[i].stream.name}: warming up: {exc}")

        threads = [threading.Thread(target=f, args=(i,), daemon=True) for i in tcp for f in (send, receive)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failed:
            self._close_sockets()
            raise TransferError(failed[0])

    def _connect(self, s: Stream) -> None:
        kind = socket.SOCK_STREAM if s.protocol == "tcp" else socket.SOCK_DGRAM
        rx = socket_in(s.dst_pid, kind)
        self._receivers.append(rx)  # listening for now; for TCP, replaced by the accepted connection below
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        rx.bind((s.dst_ip, s.dst_port))
        if s.protocol == "tcp":
            rx.listen(1)
        tx = socket_in(s.src_pid, kind)
        self._senders.append(tx)
        tx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if s.protocol == "tcp":
            tx.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, TCP_CONGESTION.encode())
        tx.bind((s.src_ip, s.src_port))
        tx.settimeout(10.0)
        tx.connect((s.dst_ip, s.dst_port))
        tx.settimeout(None)
        if s.protocol == "tcp":
            rx.settimeout(10.0)
            conn, _ = rx.accept()
            rx.close()
            conn.settimeout(None)
            self._receivers[-1] = conn

    def start(self) -> TransferEngine:
        self._t0 = time.monotonic()
        for i in range(len(self.results)):
            self._readers.append(self._spawn(self._receive, i))
            self._workers.append(self._spawn(self._send, i))
        self._workers += [self._spawn(self._coordinate, job) for job in self.jobs]
        return self

    @staticmethod
    def _spawn(target, arg) -> threading.Thread:
        thread = threading.Thread(target=target, args=(arg,), daemon=True, name=f"transfer{target.__name__}")
        thread.start()
        return thread

    def now(self) -> float:
        return time.monotonic() - self._t0

    # --- the run ------------------------------------------------------------
    def wait(self, drain_s: float = 0.5) -> None:
        """Until every job's last iteration and every window is over (at most
        `grace_s` past the planned end), then `drain_s` for bytes in flight to
        land; then every connection is closed."""
        deadline = self._t0 + self.duration_s + self.grace_s
        for thread in self._workers:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        time.sleep(drain_s)
        self.close()

    def close(self) -> None:
        self._closing.set()
        for q in self._releases:
            q.put(None)
        self._close_sockets()
        with self._done:
            self._done.notify_all()
        for thread in self._workers + self._readers:
            thread.join(timeout=2.0)

    def _close_sockets(self) -> None:
        for s in self._senders + self._receivers:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _coordinate(self, job: Schedule) -> None:
        try:
            self._iterate(job)
        finally:
            for i in job.streams:  # its senders are done too: the run need not wait for the deadline
                self._releases[i].put(None)

    def _iterate(self, job: Schedule) -> None:
        self._sleep_until(job.start_s)
        end = self.duration_s + self.grace_s
        for k in range(job.iterations):
            start = self.now()
            if start >= self.duration_s or self._closing.is_set():
                return
            for i in job.streams:
                self.results[i].bursts.append(Burst(start))
                self._releases[i].put(k)
            bursts = [self.results[i].bursts[k] for i in job.streams]
            with self._done:
                self._done.wait_for(
                    lambda: self._closing.is_set() or self.now() >= end or all(b.done is not None for b in bursts),  # noqa: B023 (waited on here, in this iteration)
                    timeout=max(0.0, end - self.now()),
                )
            finished = all(b.done is not None for b in bursts)
            ends = [b.done for b in bursts if b.done is not None]
            sent = [b.sent for b in bursts if b.sent is not None]
            self.iterations.append(
                Iteration(job.job, k, start, max(ends) if finished and ends else None, max(sent, default=start) - start)
            )
            if not finished:
                return
            self._sleep_until(max(ends) + job.compute_gap_s)  # the gap runs from the last byte

    def _sleep_until(self, t: float) -> None:
        self._closing.wait(max(0.0, t - self.now()))

    def _send(self, i: int) -> None:
        result = self.results[i]
        s = result.stream
        windows = [(start, stop) for start, stop in s.windows if start < self.duration_s]
        try:
            # Bursts go one after another: one still sending when the next window
            # opens delays it (a checkpoint waits for the one before).
            for k, (start, stop) in enumerate(windows):
                self._sleep_until(start)
                if self._closing.is_set():
                    return
                result.bursts.append(Burst(start))
                self._burst(i, k, stop)
            while not windows and (released := self._releases[i].get()) is not None:
                self._burst(i, released, math.inf)
        except OSError as exc:
            if not self._closing.is_set():
                result.error = f"sender: {exc}"
        finally:
            # Windows the run ended before reaching count as bursts that did not finish.
            result.bursts += [Burst(start) for start, _ in windows[len(result.bursts) :]]

    def _burst(self, i: int, k: int, stop: float) -> None:
        """Burst k of stream i: its bytes, or until `stop` for an unbounded one."""
        s, tx = self.results[i].stream, self._senders[i]
        self.results[i].bursts[k].sent = self.now()
        left = s.bytes or math.inf
        payload = UDP_PAYLOAD_BYTES if s.protocol == "udp" else CHUNK_BYTES
        if math.isfinite(s.rate_bps):
            payload = min(payload, max(1024, int(s.rate_bps / 8 * PACING_TICK_S)))
        block = memoryview(bytearray(payload))
        seq = 0
        clock = self.now()
        while left > 0 and not self._closing.is_set():
            if not s.bytes and self.now() >= stop:
                return
            n = int(min(payload, left))
            if s.protocol == "udp":
                n = max(n, _HEADER.size)  # every datagram carries its burst and sequence
                _HEADER.pack_into(block, 0, k, seq)
                tx.send(block[:n])
                seq += 1
            else:
                tx.sendall(block[:n])
            left -= n
            if math.isfinite(s.rate_bps):
                clock += n * 8 / s.rate_bps
                self._sleep_until(clock)

    def _receive(self, i: int) -> None:
        result = self.results[i]
        s, rx = result.stream, self._receivers[i]
        buf = memoryview(bytearray(max(CHUNK_BYTES, UDP_PAYLOAD_BYTES)))
        total = 0
        per_burst: dict[int, int] = {}
        try:
            while not self._closing.is_set():
                n = rx.recv_into(buf)
                now = self.now()
                if n == 0:
                    return
                second = int(now)
                if second >= len(result.interval_bytes):
                    result.interval_bytes.extend([0] * (second + 1 - len(result.interval_bytes)))
                result.interval_bytes[second] += n
                if not s.bytes:
                    continue
                if s.protocol == "udp":
                    k, _ = _HEADER.unpack_from(buf, 0)
                    per_burst[k] = per_burst.get(k, 0) + n
                    self._arrived(result, k, now, per_burst[k])
                    continue
                before, total = total, total + n
                # A TCP stream carries its bursts back to back: burst k is bytes [k*B, (k+1)*B).
                for k in range(before // s.bytes, (total - 1) // s.bytes + 1):
                    self._arrived(result, k, now, min(total, (k + 1) * s.bytes) - k * s.bytes)
        except OSError as exc:
            if not self._closing.is_set():
                result.error = f"receiver: {exc}"

    def _arrived(self, result: StreamResult, k: int, now: float, received: int) -> None:
        if k >= len(result.bursts):  # not a burst of this run (a stray datagram): nothing to account
            return
        burst = result.bursts[k]
        burst.received = received
        if received >= result.stream.bytes and burst.done is None:
            burst.done = now
            with self._done:
                self._done.notify_all()
