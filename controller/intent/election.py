"""Leader election on an etcd lease: one replica leads, the others follow.

A replica leads while P/leader holds its address on a lease it keeps alive.
The key's creation revision is the leadership's generation: it grows with
every election, so it fences both the store (a deposed leader's writes are
refused, etcd_store.py) and the switches (OpenFlow role requests carry it,
and a switch refuses a smaller one).

A leader that cannot renew its lease steps down by itself once 3/4 of the
TTL has passed since its last renewal: before etcd can expire the lease and
let another replica in, so two replicas never both believe they lead.

Two leader keys no replica can outlive on its own:
- its own address on a lease it does not renew (an earlier run of it, or
  its own lease from before etcd restarted, which etcd keeps alive a
  while): it revokes that lease and stands again at once;
- a key with no lease (written by hand, or by another program): etcd will
  never expire it, so nobody can lead until it is deleted. Every replica
  reports it (log, `railyard_leader_key_leaseless`, an alert) and names no
  leader meanwhile; the recovery is to delete the key (docs/high-availability.md).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from controller.intent.etcd_store import EtcdKv, compare_create, put_op, unb64
from controller.intent.store import StoreError

log = logging.getLogger(__name__)

LEASE_TTL_S = 2  # etcd's lease TTLs are whole seconds
POLL_S = 0.1  # a leader's rounds: its renewal deadline is checked this often
# A follower's: a replica that watches the store is poked (`poke`) as soon as
# the leader key changes, so polling is only the fallback.
FOLLOW_POLL_S = 0.5


@dataclass(frozen=True)
class Leadership:
    leader: str  # the leading replica's address ("" when none)
    generation: int  # creation revision of the leader key (0 when none)
    ours: bool


NOBODY = Leadership("", 0, False)


class Election:
    def __init__(
        self,
        kv: EtcdKv,
        address: str,
        on_change: Callable[[Leadership], None],
        ttl_s: int = LEASE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        eligible: Callable[[], bool] = lambda: True,
        on_leaseless: Callable[[bool], None] = lambda found: None,
    ) -> None:
        self.kv = kv
        self.key = f"{kv.url.prefix}/leader"
        self.address = address
        self.on_change = on_change
        self.ttl_s = ttl_s
        self.clock = clock
        # Whether this replica may stand: one that cannot read the intent must not lead.
        self.eligible = eligible
        self.on_leaseless = on_leaseless
        self.leaseless = 0  # the generation of a lease-less leader key seen (0: none)
        self.state = Leadership("", 0, False)
        self._lease = 0
        self._renewed_at = 0.0
        self._stop = threading.Event()
        self._poked = threading.Event()
        self.follow_poll_s = POLL_S  # FOLLOW_POLL_S where something pokes it (ha.py)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="election", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """The leader key changed: look at it now, not at the next round."""
        self._poked.set()

    def stop(self, resign: bool = True) -> None:
        self._stop.set()
        self._poked.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if resign and self.state.ours and self._lease:
            with contextlib.suppress(StoreError):
                self.kv.revoke(self._lease)  # the others need not wait out the TTL

    def resign(self, why: str) -> None:
        """Gives up the leadership now (e.g. a new leader that cannot read the intent)."""
        lease = self._lease
        self._step_down(why)
        if lease:
            with contextlib.suppress(StoreError):
                self.kv.revoke(lease)

    def fresh(self) -> bool:
        """Ours, and renewed recently enough that etcd cannot have let another replica in."""
        return self.state.ours and self.clock() - self._renewed_at < self.ttl_s * 0.75

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except StoreError as exc:
                log.warning("election: %s", exc)
            except Exception as exc:  # never let the thread die holding a leadership it no longer renews
                log.error("election: round failed: %s: %s", type(exc).__name__, exc)
                if self.state.ours:
                    self._step_down("its election round failed")
            self._poked.wait(POLL_S if self.state.ours else self.follow_poll_s)
            self._poked.clear()

    def step(self) -> None:
        """One round: renew our lease, or see who leads and stand if nobody does."""
        if self.state.ours:
            self._renew()
            return
        current = self.kv.get(self.key)
        self._leaseless(current)
        if current is None:
            if self.eligible():
                self._stand()
            elif self.state != NOBODY:
                self._set(NOBODY)
            return
        address = unb64(current.get("value", "")).decode(errors="replace")
        lease = int(current.get("lease", 0) or 0)
        if not lease:
            seen = NOBODY  # it names a replica that does not lead (it renews no lease)
        elif address == self.address:
            # Ours from before (an earlier run, or our lease from before an
            # etcd restart, which etcd keeps alive for a while): nobody renews it.
            log.warning("election: %s found its own address on lease %x, which it does not renew: revoking it",
                        self.address, lease)  # fmt: skip
            self.kv.revoke(lease)
            seen = NOBODY
        else:
            seen = Leadership(address, int(current["create_revision"]), False)
        if seen != self.state:
            self._set(seen)

    def _leaseless(self, current: dict | None) -> None:
        generation = int(current["create_revision"]) if current is not None and not current.get("lease") else 0
        if generation == self.leaseless:
            return
        if generation:
            log.error(
                "election: the leader key %s (%r) has no lease, so no replica can lead until it is deleted "
                "(see docs/high-availability.md: delete the key)",
                self.key,
                unb64(current.get("value", "")).decode(errors="replace")[:64] if current else "",
            )
        else:
            log.info("election: the lease-less leader key %s is gone", self.key)
        self.leaseless = generation
        self.on_leaseless(bool(generation))

    def _stand(self) -> None:
        lease = self.kv.grant(self.ttl_s)
        granted_at = self.clock()
        won, reply = self.kv.txn([compare_create(self.key, 0)], [put_op(self.key, self.address, lease)])
        if not won:
            self.kv.revoke(lease)
            return
        self._lease, self._renewed_at = lease, granted_at
        generation = int(reply["header"]["revision"])  # the txn created the key: its creation revision
        log.info("election: %s leads (generation %d)", self.address, generation)
        self._set(Leadership(self.address, generation, True))

    def _renew(self) -> None:
        if self.clock() - self._renewed_at >= self.ttl_s / 4:
            attempt = self.clock()
            try:
                alive = self.kv.keepalive(self._lease) > 0
            except StoreError as exc:
                log.warning("election: cannot renew the lease: %s", exc)
                alive = True  # not known to be gone: the deadline below decides
            else:
                if alive:
                    self._renewed_at = attempt
            if not alive:
                self._step_down("its lease expired")
                return
            changed = self._key_changed()
            if changed:
                self.resign(changed)
                return
        if self.clock() - self._renewed_at >= self.ttl_s * 0.75:
            self._step_down(f"no lease renewal for {self.clock() - self._renewed_at:.1f} s")

    def _key_changed(self) -> str:
        """Why the leader key is no longer this leadership's ("" while it is):
        someone deleted it, or overwrote it (a put without our lease detaches
        the key from it: etcd would then never expire it)."""
        try:
            current = self.kv.get(self.key)
        except StoreError:
            return ""  # not known to have changed: the lease's deadline decides
        if current is None:
            return "its leader key was deleted"
        ours = (self.address, self._lease, self.state.generation)
        found = (
            unb64(current.get("value", "")).decode(errors="replace"),
            int(current.get("lease", 0) or 0),
            int(current.get("create_revision", 0)),
        )
        return "" if found == ours else f"its leader key was overwritten (now {found[0][:64]!r}, lease {found[1]:x})"

    def _step_down(self, why: str) -> None:
        log.warning("election: %s steps down: %s", self.address, why)
        self._lease = 0
        self._set(NOBODY)

    def _set(self, state: Leadership) -> None:
        self.state = state
        self.on_change(state)
