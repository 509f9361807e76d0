"""`railyard certs`: certificates for mutual TLS, bearer tokens, fingerprints."""

from __future__ import annotations

from pathlib import Path

from controller.cli.output import CliError, emit


def add_certs_parser(sub) -> None:
    certs = sub.add_parser("certs", help="certificates for mutual TLS, bearer tokens, fingerprints")
    certs_sub = certs.add_subparsers(dest="certs_cmd", required=True, metavar="COMMAND")
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
    init.set_defaults(func=certs_init)
    token = certs_sub.add_parser(
        "token", help="a bearer token for IDENTITY in DIR/IDENTITY.token, its digest added to DIR/tokens.yaml"
    )
    token.add_argument("identity", help="the name the policy file gives a role")
    token.add_argument("dir", help="where the token and tokens.yaml go")
    token.set_defaults(func=certs_token)
    fingerprint = certs_sub.add_parser(
        "fingerprint", help="a certificate's SHA-256 fingerprint, as the policy's `revoked` list takes it"
    )
    fingerprint.add_argument("file", help="a PEM certificate")
    fingerprint.set_defaults(func=certs_fingerprint)
    for parser in (init, token, fingerprint):
        parser.add_argument("--json", action="store_true", help="machine-readable output")


def certs_init(args) -> int:
    from controller.security.certs import init_dir

    try:
        names = init_dir(Path(args.dir), tuple(args.server_name) or ("localhost", "127.0.0.1", "::1"))
    except FileExistsError as exc:
        raise CliError("DIR", str(exc), "a new or empty directory") from None
    except OSError as exc:
        raise CliError(
            "DIR", f"cannot write {exc.filename or args.dir}: {exc.strerror}", "a writable directory"
        ) from None
    files = [f"{n}.{ext}" for n in names for ext in ("crt", "key")]
    emit(
        args.json,
        {"dir": args.dir, "files": files},
        lambda: print(f"wrote {', '.join(n + '.crt/.key' for n in names)} to {args.dir}"),
    )
    return 0


def certs_token(args) -> int:
    from controller.security.tokens import add_token

    try:
        path = add_token(Path(args.dir), args.identity)  # a TokensError is reported by main
    except OSError as exc:
        raise CliError(
            "DIR", f"cannot write {exc.filename or args.dir}: {exc.strerror}", "a writable directory"
        ) from None
    book = Path(args.dir) / "tokens.yaml"
    emit(
        args.json,
        {"identity": args.identity, "token_file": str(path), "tokens_file": str(book)},
        lambda: print(f"wrote {path}; its digest is in {book} (controller run --tokens)"),
    )
    return 0


def certs_fingerprint(args) -> int:
    from controller.security.policy import fingerprint

    try:
        text = Path(args.file).read_text()
        value = fingerprint(text)
    except OSError as exc:
        raise CliError("FILE", f"cannot read {args.file}: {exc.strerror}", "a PEM certificate") from None
    except ValueError:
        raise CliError("FILE", f"{args.file} holds no PEM certificate", "a PEM certificate") from None
    emit(args.json, {"file": args.file, "fingerprint": value}, lambda: print(value))
    return 0
