"""The switches Railyard holds a connection to, one session each, and the
role this replica holds on them.

Connections change on os-ken's app thread (a switch connects, reconnects
before its old connection is seen to die, goes away, or a second box claims
its dpid); the role changes when an election does (ha.py). A reconcile pass
(reconciler.py) asks which sessions to work on, has them claimed, and says
which switches it left in sync. Everything here is behind one lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from controller.fabric import Fabric
from controller.metrics import Metrics
from controller.southbound.switches import CallTable, SwitchError, SwitchSession

if TYPE_CHECKING:  # os-ken's controller module imports half of os-ken; annotations only
    from os_ken.controller.controller import Datapath

log = logging.getLogger(__name__)

Role = tuple[bool, int]  # (leading, the election's generation)
Failed = Callable[[str, SwitchError, str], object]  # (switch, what failed, metric reason): logs and counts


class SwitchConnections:
    def __init__(
        self,
        fabric: Fabric,
        metrics: Metrics,
        calls: CallTable,
        reply_timeout_s: float,
        connected: Callable[[str], None],
        failed: Failed,
    ) -> None:
        """`connected(name)`: a switch (re)connected and wants a pass.
        `failed`: how a switch's failure is logged and counted."""
        self.fabric = fabric
        self.metrics = metrics
        self.calls = calls
        self.reply_timeout_s = reply_timeout_s
        self._connected = connected
        self._failed = failed
        self._sessions: dict[str, SwitchSession] = {}
        self._lock = threading.Lock()
        self._by_dpid = {sw.dpid: sw.name for sw in fabric.switches.values()}
        # Switches reconciled since they (re)connected -> the intent revision
        # they were last found or made in sync with.
        self._synced: dict[str, int] = {}
        # With replicas (ha.py): (leading, generation). A leader claims every
        # switch as MASTER with the election's generation before it reads or
        # writes; a follower is SLAVE and sends nothing else. None: the only
        # controller, which needs no role (EQUAL).
        self._role: Role | None = None

    # --- called from the os-ken app thread -----------------------------------
    def switch_connected(self, datapath: Datapath) -> None:
        name = self._by_dpid.get(datapath.id)
        if name is None:
            log.warning("ignoring switch dpid %016x: not in fabric %s", datapath.id, self.fabric.spec.name)
            self.metrics.errors.labels("southbound", "unknown_dpid").inc()
            return
        with self._lock:
            current = self._sessions.get(name)
        if current is not None and current.datapath is not datapath:
            # A second connection claims a connected switch's dpid: a switch that
            # reconnected before its old connection was seen to die, or another
            # box with the same dpid. The old one is asked (off the app thread,
            # which must not block): if it answers, the newcomer is refused.
            threading.Thread(target=self._arbitrate, args=(name, current, datapath), daemon=True).start()
            return
        self._adopt(name, datapath)

    def _arbitrate(self, name: str, current: SwitchSession, datapath: Datapath) -> None:
        try:
            current.echo()
        except SwitchError:
            self._adopt(name, datapath)  # the old connection is gone: the new one is the switch now
            return
        log.warning(
            "switch %s: a second connection (from %s) claims its dpid %016x while the first answers; refused",
            name,
            datapath.address,
            datapath.id,
        )
        self.metrics.errors.labels("southbound", "duplicate_dpid").inc()
        datapath.close()

    def _adopt(self, name: str, datapath: Datapath) -> None:
        with self._lock:
            stale = self._sessions.get(name)
            self._sessions[name] = SwitchSession(name, datapath, self.calls, self.reply_timeout_s)
            self._synced.pop(name, None)
            self._publish()
        if stale is not None:
            # The switch reconnected before os-ken noticed the old connection
            # die; whoever waits on the old one would wait for nothing.
            self.calls.fail_switch(datapath.id)
        log.info("switch %s connected (dpid %016x)", name, datapath.id)
        self._connected(name)

    def switch_disconnected(self, datapath: Datapath) -> None:
        name = self._by_dpid.get(datapath.id)
        if name is None:
            return  # not a switch of this fabric: switch_connected never gave it a session
        with self._lock:
            session = self._sessions.get(name)
            if session is None or session.datapath is not datapath:
                return  # a newer connection of the same switch already replaced it
            del self._sessions[name]
            self._synced.pop(name, None)
            self._publish()
        self.calls.fail_switch(datapath.id)
        log.info("switch %s disconnected", name)

    def names(self) -> set[str]:
        with self._lock:
            return set(self._sessions)

    def session(self, name: str) -> SwitchSession | None:
        with self._lock:
            return self._sessions.get(name)

    def sessions(self) -> dict[str, SwitchSession]:
        """The live session of each connected switch."""
        with self._lock:
            return dict(self._sessions)

    def name_of(self, dpid: int) -> str | None:
        return self._by_dpid.get(dpid)

    def _publish(self) -> None:
        self.metrics.switches_connected.set(len(self._sessions))
        for name in self.fabric.switches:
            self.metrics.switch_up.labels(name).set(1 if name in self._sessions else 0)

    # --- role (ha.py) ---------------------------------------------------------
    def set_role(self, leading: bool, generation: int) -> None:
        """This replica leads (MASTER) or follows (SLAVE) under the election's
        generation; the next pass claims it on every switch."""
        with self._lock:
            self._role = (leading, generation)

    @property
    def leading(self) -> bool:
        return self._role is None or self._role[0]

    # --- for the reconcile pass -----------------------------------------------
    def in_scope(self, scope: Collection[str] | None) -> tuple[dict[str, SwitchSession], Role | None]:
        """The sessions of `scope` (None: every connected switch), and the role to hold on them."""
        with self._lock:
            sessions = {n: s for n, s in self._sessions.items() if scope is None or n in scope}
            return sessions, self._role

    def claim(self, sessions: Mapping[str, SwitchSession], role: Role) -> tuple[dict[str, SwitchSession], set[str]]:
        """Asks each switch not yet in `role` for it. Returns the sessions that
        hold it, and those a leader has just claimed (another replica led
        since this one read their tables: read them again). A switch that
        refuses (a newer generation claimed it: this replica is deposed and
        has not heard yet) is left alone."""
        leading, generation = role
        exchanges = {}
        for name, session in sessions.items():
            if session.role != role:
                try:
                    exchanges[name] = session.start_role(leading, generation)
                except SwitchError as exc:
                    self._failed(name, exc, "role")
        held = {n: s for n, s in sessions.items() if s.role == role}
        claimed = set()
        for name, exchange in exchanges.items():
            try:
                exchange.result()
            except SwitchError as exc:
                self._failed(name, exc, "role")
                continue
            sessions[name].role = role
            held[name] = sessions[name]
            if leading:
                claimed.add(name)
        with self._lock:
            for name in claimed:
                self._synced.pop(name, None)
        return held, claimed

    def unsynced(self, names: Collection[str]) -> set[str]:
        """Of `names`, those not reconciled since they (re)connected."""
        with self._lock:
            return set(names) - self._synced.keys()

    def mark_synced(self, names: Collection[str], revision: int) -> dict[str, int]:
        """`names` are in sync with intent `revision` (those still connected);
        returns every connected switch's last sync revision."""
        with self._lock:
            for name in set(names) & self._sessions.keys():
                self._synced[name] = revision
            return dict(self._synced)
