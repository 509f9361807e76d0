"""Traffic primitives: iperf3 flows between NICs, and their per-flow goodput.

- TCP elephants: one iperf3 server per flow (port 5201+i), client source port
  pinned with --cport, so every flow has a known 5-tuple the switches hash.
- RoCE-like UDP: destination port 4791 as RoCEv2, source port for entropy.
  One iperf3 server serves one test, so the k-th UDP flow into the same NIC
  uses 4791+k; the fabric hashes and the controller matches the full 5-tuple
  either way.

Goodput is read from the *receiver's* iperf3 JSON: what arrived, not what was sent.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from controller.fabric import NicId
from controller.fabric import addressing as ad
from emulation.model.pairs import flow_ports

UDP_PAYLOAD_BYTES = 8900  # fits a 9000-byte MTU with IP/UDP headers
# Every TCP sender's congestion control, set per socket so that no figure
# depends on the host's default (a namespace inherits it, and may not change
# it to one the host does not allow): cubic, the Linux default of a fresh
# Debian 12.
TCP_CONGESTION = "cubic"


@dataclass(frozen=True)
class FlowSpec:
    src: NicId
    dst: NicId
    protocol: str  # "tcp" | "udp"
    src_port: int
    dst_port: int
    rate_bps: float = 0.0  # UDP: its sending rate; TCP: a cap (0: elastic)
    start_s: float = 0.0  # into the run
    stop_s: float | None = None  # into the run; None: with the run

    def end_s(self, duration_s: float) -> float:
        return duration_s if self.stop_s is None else min(self.stop_s, duration_s)

    @property
    def five_tuple(self) -> str:
        return (
            f"{ad.nic_address(self.src)}:{self.src_port} -> {ad.nic_address(self.dst)}:{self.dst_port}/{self.protocol}"
        )

    def ofproto_flow(self, in_port: int) -> str:
        """The flow as ovs-appctl ofproto/trace wants it."""
        return (
            f"in_port={in_port},{self.protocol},nw_src={ad.nic_address(self.src)},"
            f"nw_dst={ad.nic_address(self.dst)},nw_ttl=64,"
            f"{self.protocol}_src={self.src_port},{self.protocol}_dst={self.dst_port}"
        )


@dataclass(frozen=True)
class FlowResult:
    flow: FlowSpec
    goodput_bps: float
    interval_bps: tuple[float, ...]  # receiver goodput per 1 s interval
    lost_percent: float = 0.0
    error: str = ""

    @property
    def steady_bps(self) -> float:
        """Mean goodput after the first second (TCP slow start), the figure rates are judged by."""
        tail = self.interval_bps[1:] or self.interval_bps
        return sum(tail) / len(tail) if tail else self.goodput_bps


def make_flows(
    pairs: list[tuple[NicId, NicId]], protocol: str = "tcp", *, seed: int = 0, rate_bps: float = 0.0
) -> list[FlowSpec]:
    """Flows for (src, dst) pairs, source ports drawn from `seed` (ECMP entropy)."""
    if protocol not in ("tcp", "udp"):
        raise ValueError(f"protocol: got {protocol!r}; allowed: tcp, udp")
    ports = flow_ports(pairs, protocol, seed)
    return [FlowSpec(src, dst, protocol, sport, dport, rate_bps) for (src, dst), (sport, dport) in zip(pairs, ports)]


Runner = Callable[..., subprocess.Popen]  # (nic, argv, **popen kwargs) -> Popen in nic's namespace


class TrafficRun:
    """Start a set of flows together; `wait()` returns receiver-side results."""

    def __init__(self, popen_in: Runner, flows: list[FlowSpec], duration_s: float, raw_dir: Path | None = None) -> None:
        self.popen_in = popen_in
        self.flows = flows
        self.duration_s = duration_s
        # iperf3's own JSON reports: in `raw_dir` (kept) if given, else in a
        # temporary directory that wait() or stop() removes once read.
        self.keep_raw = raw_dir is not None
        if raw_dir is not None:
            raw_dir.mkdir(parents=True, exist_ok=True)
        self.tmp = raw_dir if raw_dir is not None else Path(tempfile.mkdtemp(prefix="railyard-traffic-"))
        self.servers: list[subprocess.Popen] = []
        self.clients: list[subprocess.Popen] = []
        self._timers: list[threading.Timer] = []  # clients that start later

    started = 0.0  # monotonic time the clients were started

    def start(self) -> TrafficRun:
        for i, flow in enumerate(self.flows):
            self.servers.append(
                self.popen_in(
                    flow.dst,
                    [
                        "iperf3",
                        "-s",
                        "-1",
                        "-J",
                        "-B",
                        ad.nic_ip(flow.dst),
                        "-p",
                        str(flow.dst_port),
                        "--logfile",
                        str(self.tmp / f"server-{i}.json"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        self._wait_listening()
        self.started = time.monotonic()
        for i, flow in enumerate(self.flows):
            if flow.start_s > 0:
                timer = threading.Timer(flow.start_s, self._start_client, args=(i, flow))
                timer.start()
                self._timers.append(timer)
            else:
                self._start_client(i, flow)
        return self

    def _start_client(self, i: int, flow: FlowSpec) -> None:
        args = [
            "iperf3",
            "-c",
            ad.nic_ip(flow.dst),
            "-B",
            ad.nic_ip(flow.src),
            "-p",
            str(flow.dst_port),
            "--cport",
            str(flow.src_port),
            "-t",
            f"{flow.end_s(self.duration_s) - flow.start_s:g}",
            "-i",
            "1",
            "-J",
            "--logfile",
            str(self.tmp / f"client-{i}.json"),
        ]
        if flow.protocol == "udp":
            args += ["-u", "-b", str(int(flow.rate_bps)), "-l", str(UDP_PAYLOAD_BYTES)]
        else:
            args += ["-C", TCP_CONGESTION]
            if flow.rate_bps:  # a cap; elastic without one
                args += ["-b", str(int(flow.rate_bps))]
        self.clients.append(self.popen_in(flow.src, args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def _wait_listening(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        pending = set(range(len(self.flows)))
        while pending and time.monotonic() < deadline:
            for i in list(pending):
                flow = self.flows[i]
                out = self.popen_in(
                    flow.dst, ["ss", "-Hltn", f"sport = :{flow.dst_port}"], stdout=subprocess.PIPE, text=True
                ).communicate()[0]
                if out.strip():
                    pending.discard(i)
            time.sleep(0.05)
        if pending:
            raise RuntimeError(f"iperf3 servers did not start for flows {sorted(pending)}")

    def wait(self, grace_s: float = 15.0) -> list[FlowResult]:
        """Until every flow ends, at most grace_s past the planned end. A flow
        whose path died never ends by itself: its iperf3 gets SIGTERM first,
        which still writes the JSON report of what did arrive."""
        deadline = self.started + self.duration_s + grace_s
        for timer in self._timers:
            timer.join()
        for proc in self.clients + self.servers:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=3)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        results = [self._result(i, flow) for i, flow in enumerate(self.flows)]
        self._clean()
        return results

    def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
        for proc in self.clients + self.servers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self._clean()

    def _clean(self) -> None:
        if not self.keep_raw:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _result(self, i: int, flow: FlowSpec) -> FlowResult:
        path = self.tmp / f"server-{i}.json"
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            return FlowResult(flow, 0.0, (), error=f"no receiver report: {exc}")
        return parse_receiver_report(flow, doc, flow.end_s(self.duration_s) - flow.start_s)


# What an iperf3 server reports when the client's end-of-test exchange, on
# its TCP control connection, does not arrive: behind a congested port (an
# incast on ECMP) that connection starves while the data already counted.
CONTROL_LOST = "the client has terminated"
# What it reports when `TrafficRun.wait` terminates it at the deadline
# because that exchange never came at all: the control connection has an
# ephemeral source port of its own, so it hashes apart from the data, and
# after a link failure it may hash into a black hole (a remote spine still
# sends to the dead link) that TE, which moves elephants, never takes it out of.
TERMINATED = "interrupt - the server has terminated"


def parse_receiver_report(flow: FlowSpec, doc: dict, expected_s: float | None = None) -> FlowResult:
    """Goodput as the receiving iperf3 server saw it. A report whose only
    fault is a lost end-of-test exchange (CONTROL_LOST, or TERMINATED: the
    server waited for it until stopped) after intervals covering the whole
    expected run is a full measurement, not an error: a flow that carried
    nothing reports its zeros."""
    if doc.get("error") and not doc.get("intervals"):
        return FlowResult(flow, 0.0, (), error=str(doc["error"]))
    error = str(doc.get("error", ""))
    covered = sum(float(iv.get("sum", {}).get("seconds", 0.0)) for iv in doc.get("intervals", []))
    if error in (CONTROL_LOST, TERMINATED) and expected_s is not None and covered >= expected_s - 1.0:
        error = ""
    end = doc.get("end", {})
    # Receiver side: sum_received counts bytes that arrived (for UDP, `sum`
    # carries the loss figures but its bytes field is the sending side's).
    total = end.get("sum_received") or end.get("sum", {})
    loss = end.get("sum", {}) if flow.protocol == "udp" else {}
    intervals = tuple(float(iv.get("sum", {}).get("bits_per_second", 0.0)) for iv in doc.get("intervals", []))
    # iperf3's last interval is often a fraction of a second of tail; drop it.
    if len(intervals) > 1 and doc["intervals"][-1]["sum"].get("seconds", 1.0) < 0.5:
        intervals = intervals[:-1]
    goodput = float(total.get("bits_per_second", 0.0))
    if doc.get("error"):  # stopped early (e.g. SIGTERM at the deadline): what arrived still counts
        goodput = sum(intervals) / len(intervals) if intervals else 0.0
    return FlowResult(
        flow,
        goodput_bps=goodput,
        interval_bps=intervals,
        lost_percent=float(loss.get("lost_percent", 0.0) or 0.0),
        error=error,
    )
