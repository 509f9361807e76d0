"""What Railyard knows of each switch's table, and when it reads one again.

After a switch's connect dump, its table is what was read plus Railyard's
own committed deltas, so intent and TE passes only diff. The periodic pass
audits that knowledge cheaply: every switch's Railyard entry count, and a
full read of a rotating share of the switches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, KeysView, Mapping
from dataclasses import dataclass

from controller.metrics import Metrics
from controller.southbound.fanout import fan_out
from controller.southbound.overlay import EntryKey, OverlayEntry, OverlayMeter
from controller.southbound.reconcile import SwitchDelta, apply_delta
from controller.southbound.switches import SwitchError, SwitchSession, meter_table, overlay_table

log = logging.getLogger(__name__)

Failed = Callable[[str, SwitchError, str], bool]  # (switch, error, reason) -> False, logged and counted


@dataclass
class SwitchTable:
    """What one switch holds, as far as Railyard knows: read by a dump on
    `session`, then kept by applying Railyard's own committed deltas."""

    session: SwitchSession
    entries: dict[EntryKey, OverlayEntry]
    meters: dict[int, OverlayMeter]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SwitchTable) and (self.entries, self.meters) == (other.entries, other.meters)

    def apply(self, delta: SwitchDelta, meters: Mapping[int, OverlayMeter]) -> None:
        apply_delta(self.entries, delta)
        self.meters = dict(meters)


class KnownTables:
    def __init__(self, metrics: Metrics, audit_every: int, max_in_flight: int) -> None:
        self.metrics = metrics
        # Every switch's table is read in full at least once every
        # `audit_every` periodic passes.
        self.audit_every = audit_every
        self.max_in_flight = max_in_flight
        # Only the reconciler thread touches these three.
        self._tables: dict[str, SwitchTable] = {}
        self._last_audit: dict[str, int] = {}  # switch -> the periodic pass count when it was last read in full
        self._passes = 0  # periodic passes so far

    def __contains__(self, name: str) -> bool:
        return name in self._tables

    def __getitem__(self, name: str) -> SwitchTable:
        return self._tables[name]

    def keys(self) -> KeysView[str]:
        return self._tables.keys()

    def forget(self, name: str) -> None:
        """Not known any more (a failed commit, another leader): read it again next pass."""
        self._tables.pop(name, None)

    def read(self, periodic: bool, sessions: dict[str, SwitchSession], failed: Failed) -> bool:
        """Brings the tables up to date for `sessions`: a switch not read
        since it connected, or whose last commit failed, is dumped. Otherwise
        its table is what Railyard committed; only the periodic pass checks
        that, cheaply: each switch's Railyard entry count (a deleted or added
        entry shows), and a full dump of a rotating share of the switches
        (an entry edited in place shows), so every switch is fully audited
        once every `audit_every` periods. False if any read failed."""
        need = {n for n, s in sessions.items() if n not in self._tables or self._tables[n].session is not s}
        ok = True
        if periodic:
            self._passes += 1
            audited = sorted(set(sessions) - need)
            share = -(-len(audited) // self.audit_every)
            need.update(sorted(audited, key=lambda n: (self._last_audit.get(n, -1), n))[:share])
            counts = fan_out({n: sessions[n].start_overlay_count for n in audited if n not in need}, self.max_in_flight)
            for name, count in counts.items():
                if isinstance(count, SwitchError):
                    ok = failed(name, count, "dump_failed")
                elif count[0].flow_count != len(self._tables[name].entries):
                    log.warning(
                        "switch %s holds %d Railyard entries, %d committed: reading it again",
                        name,
                        count[0].flow_count,
                        len(self._tables[name].entries),
                    )
                    self.metrics.overlay_drift.labels(name, "count").inc()
                    need.add(name)
        dumps = fan_out({n: sessions[n].start_overlay_dump for n in need}, self.max_in_flight)
        read = [n for n in need if not isinstance(dumps[n], SwitchError)]
        meter_dumps = fan_out({n: sessions[n].start_meter_dump for n in read}, self.max_in_flight)
        for name in need:
            stats, meter_stats = dumps[name], meter_dumps.get(name, [])
            failure = stats if isinstance(stats, SwitchError) else meter_stats
            if isinstance(failure, SwitchError):
                ok = failed(name, failure, "dump_failed")
                self._tables.pop(name, None)
                continue
            assert not isinstance(stats, SwitchError) and not isinstance(meter_stats, SwitchError)
            self._last_audit[name] = self._passes
            table = SwitchTable(sessions[name], overlay_table(name, stats), meter_table(name, meter_stats))
            previous = self._tables.get(name)
            if previous is not None and previous.session is table.session and previous != table:
                self.metrics.overlay_drift.labels(name, "dump").inc()
            self._tables[name] = table
        return ok
