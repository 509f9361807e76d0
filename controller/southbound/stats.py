"""Port and meter statistics over the controller's own OpenFlow sessions:
link loads and link state for TE with no agent at all, as Faucet's Gauge
and Hedera poll them over the channel that programs the switch.

Every `interval_s` each connected switch is asked for its port counters
(one multipart request for all ports), and, where Railyard has meters on it,
its meter statistics; every switch's requests are in flight at once
(fan_out). A port's rate is the difference of two replies' transmitted
bytes over the switch's own clock between them (the port's duration), so a
slow reply does not bend the rate. Link state comes from the port
descriptions read once per connection and the port-status messages the
switch sends when a port goes up or down, the moment it does.

What this cannot give is flows: with the underlay hashing in a select
group, no OpenFlow counter belongs to one 5-tuple, so TE sees loads and
link state but no elephants to move (docs/real-fabrics.md).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from controller.fabric import Endpoint, Fabric
from controller.metrics import Metrics
from controller.southbound.fanout import fan_out
from controller.southbound.overlay import is_railyard_meter
from controller.southbound.switches import Dump, SwitchError, SwitchSession
from controller.te.view import PortSample

if TYPE_CHECKING:  # os-ken's controller module imports half of os-ken; annotations only
    from os_ken.controller.controller import Datapath

# A request built for a switch's datapath.
Request = Callable[["Datapath"], Any]

log = logging.getLogger(__name__)

# Why 3 s: on ft2-16k's switches a round of port statistics costs the
# switches (ovs-vswitchd's CPU) what a periodic audit pass does every
# 2.6 s at the default 10 s reconcile interval, and the controller 0.42 of
# it polled every second (`make bench-southbound`, bench/stats_poll.py). At
# 3 s polling costs no more than the audit on either side. Link state does
# not wait for it: port-status messages come at once. A small fabric (the
# emulation: 6 to 16 switches) can poll every second.
DEFAULT_INTERVAL_S = 3.0


@dataclass
class _Seen:
    duration_s: float  # the port's age on the switch's clock
    tx_bytes: int
    at: float


Deliver = Callable[[list[tuple[Endpoint, PortSample]]], None]


class StatsPoller:
    def __init__(
        self,
        fabric: Fabric,
        sessions: Callable[[], dict[str, SwitchSession]],
        metrics: Metrics,
        deliver: Deliver,
        interval_s: float = DEFAULT_INTERVAL_S,
        max_in_flight: int = 64,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.fabric = fabric
        self.sessions = sessions
        self.metrics = metrics
        self.deliver = deliver
        self.interval_s = interval_s
        self.max_in_flight = max_in_flight
        self.clock = clock
        self._seen: dict[Endpoint, _Seen] = {}
        self._down: dict[str, set[int]] = {}  # switch -> ports without carrier, per connection
        self._described: dict[str, SwitchSession] = {}  # the session whose port descriptions were read
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.metered: Callable[[], set[str]] = set  # switches holding Railyard meters (the daemon sets it)
        for result in ("ok", "failed"):
            metrics.stats_polls.labels(result)

    def start(self) -> None:
        threading.Thread(target=self._run, name="openflow-stats", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.poll()
            except Exception:  # a bug must not end polling
                log.exception("openflow stats poll failed")
                self.metrics.errors.labels("southbound", "stats_poll_crash").inc()

    # --- called from the os-ken app thread -----------------------------------
    def port_status(self, switch: str, port: int, link_down: bool) -> None:
        """A port lost or regained carrier. A loss is reported at once (TE
        moves flows off a dead link without waiting for the next poll); the
        next poll reports the port up again."""
        with self._lock:
            down = self._down.setdefault(switch, set())
            (down.add if link_down else down.discard)(port)
        if link_down and port in self.fabric.ports(switch):
            self.deliver([(Endpoint(switch, port), PortSample(0.0, 0, 0, self.clock(), False))])

    # --- the poller thread --------------------------------------------------------
    def poll(self) -> int:
        """One round over every connected switch; the port samples delivered."""
        started = time.perf_counter()
        sessions = self.sessions()
        fresh = {n: s for n, s in sessions.items() if self._described.get(n) is not s}
        for name, down in ports_down(fresh, self.max_in_flight).items():
            if isinstance(down, SwitchError):
                continue
            with self._lock:
                self._down[name] = set(down)
            self._described[name] = fresh[name]
        replies = _ask(sessions, _port_stats, "port stats", self.max_in_flight)
        now = self.clock()
        samples: list[tuple[Endpoint, PortSample]] = []
        for name, result in replies.items():
            if isinstance(result, SwitchError):
                self.metrics.stats_polls.labels("failed").inc()
                continue
            self.metrics.stats_polls.labels("ok").inc()
            samples += self._rates(name, result, now)
        self._meters({n: s for n, s in sessions.items() if n in self.metered()})
        if samples:
            self.deliver(samples)
        self.metrics.stats_poll_duration.observe(time.perf_counter() - started)
        return len(samples)

    def _rates(self, name: str, stats: list[Any], now: float) -> list[tuple[Endpoint, PortSample]]:
        ports = self.fabric.ports(name)
        with self._lock:
            down = set(self._down.get(name, ()))
        out = []
        for s in stats:
            if s.port_no not in ports:
                continue  # LOCAL, or a port the spec does not have
            egress = Endpoint(name, s.port_no)
            duration = s.duration_sec + s.duration_nsec / 1e9
            before = self._seen.get(egress)
            self._seen[egress] = _Seen(duration, s.tx_bytes, now)
            if before is None or duration <= before.duration_s or s.tx_bytes < before.tx_bytes:
                continue  # the first reply, or the port was re-created: no rate yet
            link = ports[s.port_no]
            bps = (s.tx_bytes - before.tx_bytes) * 8 / (duration - before.duration_s)
            out.append((egress, PortSample(bps * link.capacity_bps / link.emulated_bps, 0, s.tx_dropped, now,
                                           s.port_no not in down)))  # fmt: skip
        return out

    def _meters(self, sessions: dict[str, SwitchSession]) -> None:
        """What Railyard's meters dropped, per switch (the incast senders policed)."""
        if not sessions:
            return
        for name, result in _ask(sessions, _meter_stats, "meter stats", self.max_in_flight).items():
            if isinstance(result, SwitchError):
                continue
            dropped = sum(b.packet_band_count for m in result if is_railyard_meter(m.meter_id) for b in m.band_stats)
            self.metrics.meter_band_packets.labels(name).set(dropped)


def ports_down(sessions: Mapping[str, SwitchSession], max_in_flight: int) -> dict[str, frozenset[int] | SwitchError]:
    """Each switch's ports whose link is down, from its port descriptions
    (one request each, all in flight at once). Port-status messages tell of
    changes only: a link that died before the connection is known this way."""
    return {
        name: result if isinstance(result, SwitchError) else
        frozenset(d.port_no for d in result if d.state & ofp.OFPPS_LINK_DOWN)
        for name, result in _ask(sessions, _port_descriptions, "port descriptions", max_in_flight).items()
    }  # fmt: skip


def _ask(
    sessions: Mapping[str, SwitchSession], request: Request, what: str, max_in_flight: int
) -> dict[str, list[Any] | SwitchError]:
    """One multipart request to each switch, all in flight at once: the replies' items."""
    starts = {n: functools.partial(_dump, s, request, what) for n, s in sessions.items()}
    return fan_out(starts, max_in_flight)


def _dump(session: SwitchSession, request: Request, what: str) -> Dump:
    return session.start_dump(request(session.datapath), what)


def _port_descriptions(datapath: Datapath) -> parser.OFPPortDescStatsRequest:
    return parser.OFPPortDescStatsRequest(datapath, 0)


def _port_stats(datapath: Datapath) -> parser.OFPPortStatsRequest:
    return parser.OFPPortStatsRequest(datapath, 0, ofp.OFPP_ANY)


def _meter_stats(datapath: Datapath) -> parser.OFPMeterStatsRequest:
    return parser.OFPMeterStatsRequest(datapath, 0, ofp.OFPM_ALL)
