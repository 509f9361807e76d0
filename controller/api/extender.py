"""The kube-scheduler extender endpoint (`controller run --extender-listen`):
POST /filter and POST /prioritize, JSON in kube-scheduler's shapes
(controller/schedulers/extender.py answers them).

With the daemon's TLS, it is HTTPS and the scheduler must present a client
certificate from the CA whose name the policy gives a role that may read
jobs (scheduler, operator or viewer): KubeSchedulerConfiguration's
extender tlsConfig carries it (deploy/k8s/scheduler-extender.yaml).
"""

from __future__ import annotations

import json
import logging
import ssl
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler

from controller.api.listener import GuardedHttpServer
from controller.api.server import MutualTls
from controller.intent.service import IntentService
from controller.metrics import Metrics
from controller.schedulers.extender import (
    ExtenderError,
    candidate_nodes,
    check_depth,
    filter_nodes,
    pod_job,
    prioritize,
)
from controller.schedulers.hosts import HostMap
from controller.security.policy import Role

log = logging.getLogger(__name__)

# The largest real request: a Pod as large as etcd stores one (1.5 MiB, its
# default --max-request-bytes) and NodeNames (nodeCacheCapable, as shipped)
# for a cluster at Kubernetes' limit of 5,000 nodes, each name at most 253
# characters. Full Node objects (nodeCacheCapable: false) fit for a few
# hundred nodes; larger clusters send names.
MAX_BODY_BYTES = 3 * 1024 * 1024
READERS = {Role.SCHEDULER, Role.OPERATOR, Role.VIEWER}
VERBS = {"/filter": "ExtenderFilter", "/prioritize": "ExtenderPrioritize"}


class ExtenderServer:
    def __init__(
        self,
        service: IntentService,
        hosts: HostMap,
        metrics: Metrics,
        host: str,
        port: int,
        tls: MutualTls | None = None,
        certfile: str | None = None,
        keyfile: str | None = None,
        cafile: str | None = None,
    ) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                server.handle(self)

            def log_message(self, format: str, *args) -> None:
                log.debug("extender: " + format, *args)

        self.service, self.hosts, self.metrics, self.tls = service, hosts, metrics, tls
        context = None
        if tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=cafile)
            context.load_cert_chain(certfile or "", keyfile)
            context.verify_mode = ssl.CERT_REQUIRED
        # Each connection's handshake in its own thread, with a deadline:
        # one silent client must not stall every other.
        self.httpd = GuardedHttpServer(
            "extender",
            (host, port),
            Handler,
            context,
            metrics=metrics,
        )
        self.port = self.httpd.server_address[1]
        self.rails, self.fabric_gpus = service.fabric.rails, service.fabric.gpu_count
        for method in VERBS.values():
            metrics.api_latency.labels(method)

    def start(self) -> None:
        self.httpd.start()

    def stop(self) -> None:
        self.httpd.stop()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        started = time.perf_counter()
        method = VERBS.get(request.path.split("?", 1)[0])
        if method is None:
            self._reply(request, HTTPStatus.NOT_FOUND, {"Error": f"no such verb {request.path[:64]!r}"}, "Extender", "")
            return
        denied = self._denied(request)
        if denied:
            self._reply(request, HTTPStatus.FORBIDDEN, {"Error": denied}, method, "PERMISSION_DENIED")
            return
        length_header = request.headers.get("Content-Length") or "0"
        length = int(length_header) if length_header.isdigit() else -1
        if not 0 < length <= MAX_BODY_BYTES:
            problem = f"a body of {length} bytes; allowed: 1 to {MAX_BODY_BYTES}"
            self._reply(request, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"Error": problem}, method, "INVALID_ARGUMENT")
            return
        try:
            body_bytes = request.rfile.read(length)
            check_depth(body_bytes)
            args = json.loads(body_bytes)
            nodes, objects = candidate_nodes(args)
            job = pod_job(args.get("Pod"), self.rails, self.fabric_gpus)
            view = self.service.fabric_view(job.job_id if job else "")
            if method == "ExtenderFilter":
                body: object = filter_nodes(view, self.hosts, job, nodes, objects)
            else:
                body = prioritize(view, self.hosts, job, nodes)
        except (ValueError, ExtenderError) as exc:  # json.JSONDecodeError is a ValueError
            problem = str(exc)[:500]
            if method == "ExtenderFilter":  # the protocol's own place for it: the scheduler reports it on the pod
                self._reply(request, HTTPStatus.OK, {"NodeNames": [], "Error": problem}, method, "INVALID_ARGUMENT")
            else:
                self._reply(request, HTTPStatus.BAD_REQUEST, {"Error": problem}, method, "INVALID_ARGUMENT")
            return
        except Exception as exc:  # never a dropped connection: the scheduler gets an answer it can log
            log.error("extender: %s failed: %s: %s", method, type(exc).__name__, str(exc)[:200])
            error = {"Error": f"internal error in {method}: {type(exc).__name__}"}
            self._reply(request, HTTPStatus.INTERNAL_SERVER_ERROR, error, method, "INTERNAL")
            return
        self._reply(request, HTTPStatus.OK, body, method, "OK")
        self.metrics.api_latency.labels(method).observe(time.perf_counter() - started)

    def _denied(self, request: BaseHTTPRequestHandler) -> str:
        """Why the caller may not ask; "" when it may (or the endpoint runs in the clear)."""
        if self.tls is None:
            return ""
        peer = request.connection.getpeercert() if isinstance(request.connection, ssl.SSLSocket) else None
        names = [str(pair[1]) for rdn in (peer or {}).get("subject", ()) for pair in rdn if pair[0] == "commonName"]
        grant = self.tls.policy.grant_of(names[0]) if names else None
        if grant is None or grant.role not in READERS:
            return f"identity {names[0] if names else '(none)'!r} may not ask the extender"
        return ""

    def _reply(self, request: BaseHTTPRequestHandler, status: HTTPStatus, body: object, method: str, code: str) -> None:
        data = json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)
        if code:
            self.metrics.api_requests.labels(method, code).inc()
