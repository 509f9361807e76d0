"""HTTP(S) listeners no peer can hold up: the extender's and the metrics'.

prometheus_client's server did its TLS handshake inside accept(), on its one
thread, with no deadline: one idle connection made every scrape time out
for as long as it stayed open. Here each connection gets a thread of its
own, and its handshake and each read a deadline; a peer may hold at most a
few connections at once, and all peers together a bounded number; a
handshake that fails is one line (a few per peer a minute, refusals.py),
never a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from controller.api.refusals import Sampler
from controller.errors import HostError
from controller.metrics import Metrics

log = logging.getLogger(__name__)

DEADLINE_S = 10.0  # for a handshake, and for each read and write after it
MAX_CONNECTIONS = 64
PER_PEER = 8


class GuardedHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(
        self,
        name: str,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        tls: ssl.SSLContext | None = None,
        deadline_s: float = DEADLINE_S,
        metrics: Metrics | None = None,
        max_connections: int = MAX_CONNECTIONS,
        per_peer: int = PER_PEER,
    ) -> None:
        """Each connection dropped before a request is counted in `metrics`
        (railyard_listener_refused_total{listener=name}): "handshake" (TLS
        failed or timed out), "too_many" (the caps)."""
        self.name, self.tls, self.deadline_s, self.metrics = name, tls, deadline_s, metrics
        self.max_connections, self.per_peer = max_connections, per_peer
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._sample = Sampler()
        handler.timeout = deadline_s  # each read and write once the handshake is done
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)

    def verify_request(self, request, client_address) -> bool:
        peer = client_address[0]
        with self._lock:
            if sum(self._open.values()) >= self.max_connections or self._open[peer] >= self.per_peer:
                full = True
            else:
                self._open[peer] += 1
                full = False
        if full:
            self._refused("too_many")
            self._note(peer, f"too many connections (at most {self.per_peer} a peer, {self.max_connections} in all)")
        return not full

    def process_request_thread(self, request, client_address) -> None:
        try:
            if self.tls is not None:
                request.settimeout(self.deadline_s)
                try:
                    request = self.tls.wrap_socket(request, server_side=True)  # here, in this connection's thread
                except (OSError, ssl.SSLError) as exc:
                    self._refused("handshake")
                    self._note(client_address[0], f"TLS handshake failed: {_reason(exc)}")
                    _close(request)
                    return
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._open[client_address[0]] -= 1
                if self._open[client_address[0]] <= 0:
                    del self._open[client_address[0]]

    def start(self) -> None:
        """Serves on a thread of its own, named after the listener."""
        threading.Thread(target=self.serve_forever, name=self.name, daemon=True).start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def _refused(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.listener_refused.labels(self.name, reason).inc()

    def handle_error(self, request, client_address) -> None:
        """A connection that broke mid-request (a reset, a deadline): one line."""
        self._note(client_address[0], "connection failed mid-request")

    def _note(self, peer: str, what: str) -> None:
        verdict = self._sample(peer)
        if verdict.write:
            more = f" (and {verdict.held_back} more since the last line)" if verdict.held_back else ""
            log.warning("%s listener: %s from %s%s", self.name, what, peer, more)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or exc.strerror or type(exc).__name__
    if isinstance(exc, TimeoutError | socket.timeout):
        return "no handshake within the deadline"
    return exc.strerror or type(exc).__name__ if isinstance(exc, OSError) else type(exc).__name__


def _close(sock) -> None:
    with contextlib.suppress(OSError):
        sock.close()


class CannotListen(HostError):
    """A listener could not open: which option, and the address it names."""

    def __init__(self, flag: str, address: str) -> None:
        super().__init__(f"cannot listen on {address}")
        self.flag, self.address = flag, address


def bind_problem(host: str, port: int) -> str:
    """Why `host:port` cannot be listened on ("" if it can, now): what a
    library that only says "failed to bind" does not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""
