"""Bearer tokens: an identity for clients that cannot hold a certificate
(a scheduler extender behind a webhook, a script). They are accepted only on
the token listener, which is TLS without client certificates, so a token
never crosses the wire in the clear.

The controller keeps only each token's SHA-256, so its tokens file leaks no
usable secret:

    tokens:
      k8s-extender: sha256:6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b

`railyard certs token NAME DIR` makes a token (DIR/NAME.token, owner-only)
and adds its digest to DIR/tokens.yaml. The identity maps to a role in the
policy file like a certificate's common name.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from controller.errors import FieldError
from controller.yamldoc import read_yaml

_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
# What a token may hold: it travels in an HTTP/2 header.
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9._~+/=-]{16,512}")


class TokensError(FieldError):
    context = "tokens"


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True)
class Tokens:
    digests: Mapping[str, bytes]  # identity -> SHA-256 of its token

    def identity_of(self, token: str) -> str | None:
        """The identity holding `token`, or None. Every entry is compared, in
        constant time, so how long this takes says nothing about the token."""
        presented = digest(token)
        found = None
        for identity, known in self.digests.items():
            if hmac.compare_digest(presented, known):
                found = identity
        return found


def tokens_from_doc(doc: Any) -> Tokens:
    if not isinstance(doc, dict) or set(doc) != {"tokens"}:
        raise TokensError("tokens", "must be a mapping with one key, tokens", "tokens: {NAME: sha256:HEX, ...}")
    entries = doc["tokens"]
    if not isinstance(entries, dict) or not entries:
        raise TokensError("tokens", "must be a non-empty mapping", "NAME: sha256:HEX, one per identity")
    digests: dict[str, bytes] = {}
    for name, value in entries.items():
        if not isinstance(name, str) or not name or len(name) > 64:
            raise TokensError("tokens", f"{str(name)[:64]!r} is not an identity", "a name of 1-64 chars")
        match = _DIGEST.fullmatch(value) if isinstance(value, str) else None
        if match is None:
            raise TokensError(
                f"tokens.{name}", "is not a token digest", "sha256: and 64 lowercase hex digits (not the token itself)"
            )
        digests[name] = bytes.fromhex(match.group(1))
    if len(set(digests.values())) < len(digests):
        raise TokensError("tokens", "two identities share one token", "a token of its own for each identity")
    return Tokens(digests)


def load_tokens(path: str | Path) -> Tokens:
    return tokens_from_doc(read_yaml(path, TokensError))


def read_token(path: str | Path) -> str:
    """A client's token from its file (surrounding whitespace dropped)."""
    path = Path(path)
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokensError("token", f"cannot read {path}: {exc}", "a text file holding the token") from None
    if TOKEN_PATTERN.fullmatch(token) is None:
        raise TokensError("token", f"{path} does not hold a token", "16-512 characters of A-Z a-z 0-9 . _ ~ + / = -")
    return token


def add_token(directory: Path, identity: str) -> Path:
    """A new token for `identity` in directory/IDENTITY.token (owner-only),
    its digest added to directory/tokens.yaml. Refuses an identity that
    already has one: tokens are not silently replaced."""
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", identity):
        raise TokensError("identity", f"{identity[:64]!r}", "1-64 characters of A-Z a-z 0-9 . _ -")
    book = directory / "tokens.yaml"
    entries = dict(load_tokens(book).digests) if book.exists() else {}
    token_path = directory / f"{identity}.token"
    if identity in entries or token_path.exists():
        raise TokensError("identity", f"{identity!r} already has a token in {directory}", "a new identity")
    directory.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    token_path.touch(mode=0o600)
    token_path.chmod(0o600)
    token_path.write_text(token + "\n")
    entries[identity] = digest(token)
    doc = {"tokens": {name: f"sha256:{value.hex()}" for name, value in entries.items()}}
    book.write_text("# identity -> SHA-256 of its bearer token (railyard certs token)\n" + yaml.safe_dump(doc))
    return token_path
