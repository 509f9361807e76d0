"""SIGHUP: the policy, the tokens and the TLS certificates read again and put
in force for the connections and calls that follow, without dropping one.
Anything wrong with the new files (a malformed policy, a key that does not
match its certificate, a CA that is not PEM) refuses the whole reload in one
log line, and what was in force stays."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterable

from controller.api.server import ApiServer
from controller.errors import FieldError
from controller.fabric import Fabric

log = logging.getLogger("railyard")


def reload_tls(
    files, fabric: Fabric, api: ApiServer, https: Iterable[ssl.SSLContext] = (), paths: tuple[str, str] | None = None
) -> bool:
    """`files` (the daemon's TlsFiles) read again; True if the new ones are
    in force. `https`: the HTTPS listeners' (metrics, extender) TLS contexts, which
    take the new certificate; `paths`: its (cert, key) files."""
    try:
        tls = files.load()  # the key matches the certificate, and the CA parses (certs.server_files_problem)
        tls.policy.check_switches(frozenset(fabric.switches))
    except FieldError as exc:
        log.error("SIGHUP: reload refused; the policy, tokens and certificates in force stay: %s", exc)
        return False
    api.reload_tls(tls)
    for context in https:
        if paths is not None:
            # New handshakes take the new chain. A new CA is added beside the
            # old one here (ssl cannot remove one): a restart drops the old.
            context.load_cert_chain(*paths)
            context.load_verify_locations(cadata=tls.ca.decode("ascii", "replace"))
    log.info(
        "SIGHUP: reloaded: policy (%d identities, %d revoked certificates), tokens (%s), certificates",
        len(tls.policy.grants),
        len(tls.policy.revoked),
        len(tls.tokens.digests) if tls.tokens is not None else "none",
    )
    return True
