"""The os-ken application: the only code that sees OpenFlow events.

It hands connections to the reconciler and routes replies to waiting calls.
Handlers never block: os-ken runs them one at a time on the app thread, and a
handler waiting for a reply would wait for itself.

Handlers also never raise. Under os-ken's native hub `hub.TaskExit` is
`Exception` itself, so the event loop treats any exception from a handler as
a request to exit: the app thread ends, silently, and no reply is delivered
again. Every handler is wrapped to log, count and carry on.
"""

from __future__ import annotations

import os

os.environ.setdefault("OSKEN_HUB_TYPE", "native")  # before os-ken's hub loads: eventlet would deadlock grpcio

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

# os-ken import order: app_manager before controller (circular import), and
# every module that registers options before CONF() is called.
from os_ken import cfg
from os_ken.base import app_manager
from os_ken.controller import controller as _ofp_controller  # noqa: F401  (registers ofp-* options)
from os_ken.controller import ofp_event
from os_ken.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3

from controller.southbound import ofcodec
from controller.southbound.reconciler import Reconciler

log = logging.getLogger(__name__)


def guarded(handler):
    @functools.wraps(handler)
    def wrapper(self, ev):
        try:
            handler(self, ev)
        except Exception:
            log.exception("OpenFlow handler %s failed on %s", handler.__name__, type(ev).__name__)
            self.reconciler.metrics.errors.labels("southbound", "handler_exception").inc()

    return wrapper


class RailyardApp(app_manager.OSKenApp):
    OFP_VERSIONS: ClassVar[list[int]] = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, reconciler: Reconciler, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reconciler = reconciler

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    @guarded
    def _state_change(self, ev) -> None:
        if ev.datapath.id is None:
            return  # died before the handshake told us who it was
        if ev.state == MAIN_DISPATCHER:
            self.reconciler.switch_connected(ev.datapath)
        else:
            self.reconciler.switch_disconnected(ev.datapath)

    # The replies the reconciler waits for: dumps, counts, bundle control, barriers.
    @set_ev_cls(
        [
            ofp_event.EventOFPFlowStatsReply,
            ofp_event.EventOFPMeterConfigStatsReply,
            ofp_event.EventOFPAggregateStatsReply,
            ofp_event.EventONFBundleCtrlMsg,
            ofp_event.EventOFPBarrierReply,
            ofp_event.EventOFPEchoReply,  # ours only (by xid); os-ken answers and tracks its own
            ofp_event.EventOFPRoleReply,
            ofp_event.EventOFPPortStatsReply,
            ofp_event.EventOFPPortDescStatsReply,
            ofp_event.EventOFPMeterStatsReply,
            ofp_event.EventOFPGroupDescStatsReply,
        ],
        MAIN_DISPATCHER,
    )
    @guarded
    def _reply(self, ev) -> None:
        self.reconciler.calls.deliver(ev.msg.datapath.id, ev.msg)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    @guarded
    def _port_status(self, ev) -> None:
        msg = ev.msg
        self.reconciler.port_changed(
            msg.datapath, msg.desc.port_no, bool(msg.desc.state & msg.datapath.ofproto.OFPPS_LINK_DOWN)
        )

    @set_ev_cls(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    @guarded
    def _error(self, ev) -> None:
        msg = ev.msg
        if not self.reconciler.calls.deliver(msg.datapath.id, msg):
            log.warning(
                "switch %016x: OpenFlow error type %d code %d (xid %d)",
                msg.datapath.id,
                msg.type,
                ofcodec.error_code(msg),
                msg.xid,
            )
            self.reconciler.metrics.errors.labels("southbound", "openflow_error").inc()


APP_MODULES = ["controller.southbound.app", "os_ken.controller.ofp_handler"]


@dataclass(frozen=True)
class OpenFlowTls:
    """The controller's key and certificate, and the CA every switch's
    certificate must chain to (a switch without one is refused at the handshake)."""

    key: Path
    cert: Path
    ca: Path


def start_openflow(
    reconciler: Reconciler, host: str, port: int, tls: OpenFlowTls | None = None
) -> app_manager.AppManager:
    """Opens the OpenFlow listener (TLS only, with `tls`): switches that
    connect are handed to `reconciler`."""
    cfg.CONF(args=[], project="os_ken")
    cfg.CONF.set_override("ofp_listen_host", host)
    cfg.CONF.set_override("ofp_tcp_listen_port", port)
    if tls is not None:
        cfg.CONF.set_override("ofp_ssl_listen_port", port)
        cfg.CONF.set_override("ctl_privkey", str(tls.key))
        cfg.CONF.set_override("ctl_cert", str(tls.cert))
        cfg.CONF.set_override("ca_certs", str(tls.ca))
    # os-ken's default (0 unreplied echoes) disables keepalives. Beyond
    # dead-peer detection they matter under the native hub: a closed
    # connection is only torn down (and reported DEAD) once its send loop
    # wakes up, which the next echo request does.
    cfg.CONF.set_override("echo_request_interval", 2)
    cfg.CONF.set_override("maximum_unreplied_echo_requests", 3)
    manager = app_manager.AppManager.get_instance()
    manager.load_apps(APP_MODULES)
    # Not AppManager.run_apps: under the native hub its cleanup calls a
    # kill() that HubThread lacks.
    manager.instantiate_apps(**manager.create_contexts(), reconciler=reconciler)
    return manager
