"""What a refused peer may cost: a counter tick, and now and then a line.

Every refusal (a call without a token, a role that may not call, a TLS
handshake that failed) is counted by whoever refuses it. Log lines and
audit records are another matter: one client on one connection once wrote
166 B of log and 146 B of audit per refused call, some 45-50 GiB a day.
So each peer gets a few lines per window, and then one line saying how
many more there were; memory is bounded by a cap on the peers tracked.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

PER_PEER = 5  # lines a peer gets per window
WINDOW_S = 60.0
TOTAL = 100  # lines every peer together gets per window: many peers must not add up to a flood either
MAX_PEERS = 10_000  # tracked at once; the idlest go first (they would start a fresh window anyway)


@dataclass
class _Window:
    started: float
    written: int = 0
    held_back: int = 0


@dataclass(frozen=True)
class Verdict:
    """Whether to write this refusal's line, and how many of the peer's
    before it were held back (say so in the line when there were)."""

    write: bool
    held_back: int = 0


class Sampler:
    """Per peer: the first PER_PEER refusals of a window are written; the
    rest are held back and counted, and the next line written for that peer
    says how many."""

    def __init__(
        self,
        per_peer: int = PER_PEER,
        window_s: float = WINDOW_S,
        total: int = TOTAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_peer, self.window_s, self.total, self.clock = per_peer, window_s, total, clock
        self._peers: OrderedDict[str, _Window] = OrderedDict()
        self._all = _Window(0.0)
        self._lock = threading.Lock()

    def __call__(self, peer: str) -> Verdict:
        now = self.clock()
        with self._lock:
            if now - self._all.started >= self.window_s:
                self._all = _Window(now)
            window = self._peers.get(peer)
            if window is None or now - window.started >= self.window_s:
                held = window.held_back if window is not None else 0
                window = self._peers[peer] = _Window(now, held_back=held)
            self._peers.move_to_end(peer)
            while len(self._peers) > MAX_PEERS:
                self._peers.popitem(last=False)
            if window.written >= self.per_peer or self._all.written >= self.total:
                window.held_back += 1
                return Verdict(False)
            window.written += 1
            self._all.written += 1
            held, window.held_back = window.held_back, 0
            return Verdict(True, held)


def peer_address(context) -> str:
    """The client's IP address from a gRPC context's peer ("ipv4:10.0.0.7:51234")."""
    peer = unquote(context.peer() or "")
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        host = rest.rpartition(":")[0]
        return host.strip("[]") or rest
    return peer


# What a connection's thread dies of when its peer fails the TLS handshake
# or goes away: os-ken logs each with a full traceback.
_PEER_FAILURES = ("SSLError", "SSLEOFError", "ConnectionResetError", "BrokenPipeError", "TimeoutError")


class OneLinePeerFailures(logging.Filter):
    """Turns a library's traceback for a connection whose peer failed (a
    TLS handshake, a reset) into one line, a few a minute, the rest counted
    in the next line. Other tracebacks pass untouched."""

    def __init__(self, listener: str) -> None:
        super().__init__()
        self.listener = listener
        self.sample = Sampler()

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage().strip()
        last = text.splitlines()[-1] if text else ""
        if "Traceback" not in text or not any(kind in last for kind in _PEER_FAILURES):
            return True
        verdict = self.sample(self.listener)
        if not verdict.write:
            return False
        more = f" (and {verdict.held_back} more since the last line)" if verdict.held_back else ""
        record.msg, record.args, record.exc_info = (
            "%s listener: a peer's connection failed: %s%s",
            (
                self.listener,
                last[:200],
                more,
            ),
            None,
        )
        return True
