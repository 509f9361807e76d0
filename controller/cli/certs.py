"""`railyard certs`: certificates for mutual TLS, and bearer tokens."""

from __future__ import annotations

import sys
from pathlib import Path


def add_certs_parser(sub) -> None:
    certs = sub.add_parser("certs", help="certificates for mutual TLS, and bearer tokens")
    certs_sub = certs.add_subparsers(dest="certs_cmd", required=True)
    init = certs_sub.add_parser(
        "init",
        help="a development CA, the controller's certificate, and client certificates",
    )
    init.add_argument("dir", help="an empty or new directory")
    init.add_argument(
        "--server-name",
        action="append",
        default=[],
        help="a DNS name or address the controller is reached at (repeatable; default localhost, 127.0.0.1, ::1)",
    )
    init.set_defaults(run=certs_init)
    token = certs_sub.add_parser(
        "token", help="a bearer token for IDENTITY in DIR/IDENTITY.token, its digest added to DIR/tokens.yaml"
    )
    token.add_argument("identity", help="the name the policy file gives a role")
    token.add_argument("dir", help="where the token and tokens.yaml go")
    token.set_defaults(run=certs_token)


def certs_init(args) -> int:
    from controller.security.certs import init_dir

    try:
        names = init_dir(Path(args.dir), tuple(args.server_name) or ("localhost", "127.0.0.1", "::1"))
    except (FileExistsError, OSError) as exc:
        print(f"railyard: certs init: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {', '.join(n + '.crt/.key' for n in names)} to {args.dir}")
    return 0


def certs_token(args) -> int:
    from controller.security.tokens import add_token

    path = add_token(Path(args.dir), args.identity)  # a TokensError is reported by main
    print(f"wrote {path}; its digest is in {Path(args.dir) / 'tokens.yaml'} (controller run --tokens)")
    return 0
