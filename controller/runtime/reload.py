"""SIGHUP: the policy, the tokens and the TLS certificates read again and put
in force for the connections and calls that follow, without dropping one.
Anything wrong with the new files (a malformed policy, a key that does not
match its certificate, a CA that is not PEM) refuses the whole reload in one
log line, and what was in force stays."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterable

from controller.api.server import ApiServer, MutualTls
from controller.errors import FieldError
from controller.fabric import Fabric

log = logging.getLogger("railyard")


class ReloadError(FieldError):
    context = "reload"


def check_material(files, tls: MutualTls) -> None:
    """The certificate and key belong together and the CA parses, as the TLS
    library will use them: checked before anything is swapped."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_verify_locations(cadata=tls.ca.decode("ascii", "replace"))
    except (ssl.SSLError, ValueError) as exc:
        raise ReloadError("tls-ca", f"not a usable CA certificate ({exc})", "a PEM CA certificate") from None
    try:
        context.load_cert_chain(str(files.cert), str(files.key))
    except ssl.SSLError as exc:
        raise ReloadError(
            "tls-key", f"does not go with the certificate in --tls-cert ({exc.reason or exc})", "the certificate's key"
        ) from None


def reload_tls(
    files, fabric: Fabric, api: ApiServer, https: Iterable[ssl.SSLSocket] = (), paths: tuple[str, str] | None = None
) -> bool:
    """`files` (the daemon's TlsFiles) read again; True if the new ones are
    in force. `https`: the HTTPS listeners (metrics, extender), whose
    contexts take the new certificate; `paths`: its (cert, key) files."""
    try:
        tls = files.load()
        tls.policy.check_switches(frozenset(fabric.switches))
        check_material(files, tls)
    except FieldError as exc:
        log.error("SIGHUP: reload refused; the policy, tokens and certificates in force stay: %s", exc)
        return False
    api.reload_tls(tls)
    for sock in https:
        if paths is not None:
            # New handshakes take the new chain. A new CA is added beside the
            # old one here (ssl cannot remove one): a restart drops the old.
            sock.context.load_cert_chain(*paths)
            sock.context.load_verify_locations(cadata=tls.ca.decode("ascii", "replace"))
    log.info(
        "SIGHUP: reloaded: policy (%d identities, %d revoked certificates), tokens (%s), certificates",
        len(tls.policy.grants),
        len(tls.policy.revoked),
        len(tls.tokens.digests) if tls.tokens is not None else "none",
    )
    return True
