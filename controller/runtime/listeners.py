"""Every listener a daemon's configuration opens, with its scheme: what the
startup line and `railyard controller check-config` print."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from controller.runtime.config import DaemonConfig


def listeners(config: DaemonConfig) -> list[tuple[str, str]]:
    """(name, URL) per listener, in the order the daemon opens them."""
    tls = config.tls is not None
    out = [
        ("metrics", f"{'https' if tls else 'http'}://{config.metrics}/metrics"),
        ("openflow", f"{'ssl' if tls else 'tcp'}:{config.openflow}"),
        ("grpc", f"{'grpcs' if tls else 'grpc'}://{config.grpc}"),
    ]
    if config.tls is not None and config.tls.token_listen is not None:
        out.append(("grpc-token", f"grpcs://{config.tls.token_listen}"))
    if config.extender is not None:
        out.append(("extender", f"{'https' if tls else 'http'}://{config.extender}"))
    return out
