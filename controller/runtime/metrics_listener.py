"""The metrics listener: GET /metrics for Prometheus, GET /healthz for a
liveness probe.

/healthz is answered from memory (is every thread the daemon needs still
running?) and asks for no client certificate, even when /metrics does
(--metrics-client-certs): the kubelet presents none. A probe of /metrics
would render every link's series, and any peer that could hold the
listener up could make the kubelet restart the controller.
"""

from __future__ import annotations

import gzip
import ssl
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from controller.api.listener import GuardedHttpServer
from controller.metrics import Metrics
from controller.telemetry.priority import ApiFirst

EOF = b"# EOF\n"  # OpenMetrics' last line


class MetricsListener:
    def __init__(
        self,
        metrics: Metrics,
        host: str,
        port: int,
        dead: Callable[[], str],
        priority: ApiFirst,
        certfile: str | None = None,
        keyfile: str | None = None,
        client_cafile: str | None = None,
    ) -> None:
        """HTTPS with `certfile` and `keyfile`; with `client_cafile` too,
        /metrics wants a client certificate chaining to it. `dead()` names
        what no longer runs ("" while all does)."""
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                listener.answer(self)

            def log_message(self, format: str, *args) -> None:
                pass  # a scrape every few seconds is not news

        context = None
        if certfile is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=client_cafile)
            context.load_cert_chain(certfile, keyfile)
            # Asked for, checked if given, but not required at the handshake:
            # /healthz answers without one; /metrics refuses (below).
            context.verify_mode = ssl.CERT_OPTIONAL if client_cafile else ssl.CERT_NONE
        self.registry, self.dead, self.client_certs = metrics.registry, dead, client_cafile is not None
        self.priority = priority
        self.httpd = GuardedHttpServer(
            "metrics",
            (host, port),
            Handler,
            context,
            metrics=metrics,
        )
        self.port = self.httpd.server_address[1]

    def start(self) -> None:
        self.httpd.start()

    def stop(self) -> None:
        self.httpd.stop()

    def _render(self, encoder: Callable[[Any], bytes], content_type: str) -> bytes:
        """Family by family, stepping aside for API calls before each: at
        16K GPUs a scrape is ~22,000 series and 0.3 s of Python, and an API
        call sharing the interpreter lock with all of it took that much
        longer (make bench-soak)."""
        parts = []
        for family in self.registry.collect():
            self.priority.yield_to_api()
            parts.append(encoder(_Family(family)).removesuffix(EOF))
        if content_type.startswith("application/openmetrics-text"):
            parts.append(EOF)  # once, at the end
        return b"".join(parts)

    def answer(self, request: BaseHTTPRequestHandler) -> None:
        path = request.path.split("?", 1)[0]
        if path == "/healthz":
            dead = self.dead()
            status = HTTPStatus.SERVICE_UNAVAILABLE if dead else HTTPStatus.OK
            _reply(request, status, (f"dead: {dead}\n" if dead else "ok\n").encode(), "text/plain; charset=utf-8")
        elif path == "/metrics":
            if self.client_certs and not request.connection.getpeercert():
                _reply(request, HTTPStatus.FORBIDDEN, b"a client certificate from the CA is required\n", "text/plain")
                return
            encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
            body = self._render(encoder, content_type)
            if "gzip" in request.headers.get("Accept-Encoding", ""):
                _reply(request, HTTPStatus.OK, gzip.compress(body), content_type, gzipped=True)
            else:
                _reply(request, HTTPStatus.OK, body, content_type)
        else:
            _reply(request, HTTPStatus.NOT_FOUND, b"/metrics or /healthz\n", "text/plain")


class _Family:
    """One metric family, as a registry an encoder can render."""

    def __init__(self, family: Metric) -> None:
        self._family = family

    def collect(self) -> list[Metric]:
        return [self._family]


def _reply(request: BaseHTTPRequestHandler, status: HTTPStatus, body: bytes, content_type: str, gzipped=False) -> None:
    request.send_response(status)
    request.send_header("Content-Type", content_type)
    request.send_header("Content-Length", str(len(body)))
    if gzipped:
        request.send_header("Content-Encoding", "gzip")
    request.end_headers()
    request.wfile.write(body)
