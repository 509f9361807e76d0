"""How an API command reaches the controller: its address and TLS identity
(flags, else RAILYARD_* environment variables, as etcdctl and kubectl read
theirs), and what a failed call prints."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import grpc

from controller.api.client import DEFAULT_TARGET, Client, ClientTls
from controller.cli.output import CliError

# flag -> the environment variable that stands in for it
ENVIRONMENT = {
    "target": "RAILYARD_TARGET",
    "ca": "RAILYARD_CA",
    "cert": "RAILYARD_CERT",
    "key": "RAILYARD_KEY",
    "token": "RAILYARD_TOKEN",
}


def add_client_options(parser) -> None:
    env = os.environ.get
    parser.add_argument(
        "--target",
        default=env(ENVIRONMENT["target"], DEFAULT_TARGET),
        help=f"controller gRPC address, or every replica's, comma-separated (env RAILYARD_TARGET; "
        f"default {DEFAULT_TARGET})",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--ca",
        default=env(ENVIRONMENT["ca"]),
        help="CA the controller's certificate chains to (TLS; with --cert and --key, or --token) (env RAILYARD_CA)",
    )
    parser.add_argument(
        "--cert",
        default=env(ENVIRONMENT["cert"]),
        help="this client's certificate (PEM): its identity (env RAILYARD_CERT)",
    )
    parser.add_argument(
        "--key", default=env(ENVIRONMENT["key"]), help="this client's private key (PEM) (env RAILYARD_KEY)"
    )
    parser.add_argument(
        "--token",
        metavar="FILE",
        default=env(ENVIRONMENT["token"]),
        help="a file holding this client's bearer token, for the token listener (env RAILYARD_TOKEN)",
    )


def all_or_none(args, flags: tuple[str, ...], error: type[CliError] | type) -> list[str] | None:
    """The values of options that go together; None when none is given."""
    values = [getattr(args, flag.replace("-", "_")) for flag in flags]
    if not any(values):
        return None
    missing = [flag for flag, value in zip(flags, values) if not value]
    if missing:
        together = ", ".join(f"--{flag}" for flag in flags[:-1]) + f" and --{flags[-1]} go together"
        raise error(missing[0], "missing", together)
    return values


def client_tls(args) -> ClientTls | None:
    if args.token:
        if args.cert or args.key:
            raise CliError("--token", "given with --cert/--key", "a certificate and key, or a token, not both")
        if not args.ca:
            raise CliError("--ca", "missing", "--token goes with --ca (the token listener is TLS)")
        try:
            return ClientTls.with_token(args.ca, args.token)
        except OSError as exc:
            raise CliError("--ca", f"cannot read {exc.filename}: {exc.strerror}", "a readable PEM file") from None
    given = all_or_none(args, ("ca", "cert", "key"), CliError)
    if given is None:
        return None
    try:
        return ClientTls.from_files(*given)
    except OSError as exc:
        raise CliError(
            "--ca/--cert/--key", f"cannot read {exc.filename}: {exc.strerror}", "readable PEM files"
        ) from None


# What gRPC's client says when no answer came back at all: no connection, a
# refused or failed TLS handshake, a peer that hung up.
_TRANSPORT = ("failed to connect", "connections to all backends failing", "socket closed", "handshake", "ssl")


def failure(exc: grpc.RpcError, target: str) -> str:
    """A failed call in one line, saying whether the controller answered at all."""
    code = exc.code() if isinstance(exc, grpc.Call) else None
    details = (exc.details() if isinstance(exc, grpc.Call) else None) or str(exc)
    if code is grpc.StatusCode.UNAVAILABLE and any(word in details.lower() for word in _TRANSPORT):
        return (
            f"cannot reach the controller at {target} (a transport failure, no answer: {details}); "
            "is it running there, and does it expect TLS (--ca with --cert/--key or --token)?"
        )
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"no answer from the controller at {target} in time ({details})"
    return f"{code.name if code else 'ERROR'}: {details}"


def api_command(run: Callable[[Client, object], int]) -> Callable[[object], int]:
    """A command that calls the API: connected as its flags say; a failed
    call is one line on stderr and exit status 1."""

    def command(args) -> int:
        try:
            with Client(args.target, tls=client_tls(args)) as client:
                return run(client, args)
        except grpc.RpcError as exc:
            print(f"railyard: {failure(exc, args.target)}", file=sys.stderr)
            return 1

    return command
