"""The intent store on etcd: what replicas of the controller share.

Keys under one prefix P:
    P/intent/<kind>/<name>   a record's JSON document
    P/revision               the intent revision (a decimal)
    P/leader                 the elected replica's address, on its lease (election.py)

Every change is one etcd transaction guarded twice: by the modification
revision of P/revision this store last read or wrote (compare-and-swap: of
two writers that read the same intent, exactly one wins), and, with a
fence, by the creation revision of P/leader (only the current leader's
writes land: a deposed leader's are refused even if it has not noticed).

The client is etcd3gw, over etcd's gRPC gateway (HTTP/JSON): maintained by
OpenStack, pure Python, and no second protobuf runtime next to grpcio's. It
talks to one member, so `EtcdKv` moves on to the next endpoint when one
does not answer.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.errors import FieldError, Status
from controller.intent.store import (
    BadStoredValue,
    Change,
    Observe,
    Snapshot,
    StoreError,
    stored_document,
    stored_revision,
)

with warnings.catch_warnings():
    # futurist (an etcd3gw dependency) imports eventlet when it is installed
    # (os-ken's), which warns that it is deprecated: not ours to act on.
    warnings.simplefilter("ignore")
    import etcd3gw
    from etcd3gw import exceptions as etcd_errors

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 2.0
# What leaves a request's outcome unknown; any other error of etcd's is a refusal.
UNANSWERED = (etcd_errors.ConnectionFailedError, etcd_errors.ConnectionTimeoutError, etcd_errors.InternalServerError)


class StoreUrlError(FieldError):
    context = "store"


class StoreUnavailable(StoreError):
    """No etcd member answered: the change may or may not have landed (UNAVAILABLE)."""

    status = Status.UNAVAILABLE


class StoreConflict(StoreError):
    """The store moved under this writer (another writer, or leadership lost): nothing was written."""

    status = Status.ABORTED


class StoreRefused(StoreError):
    """etcd refused the request (e.g. over its size or operation limits): nothing was written."""

    status = Status.RESOURCE_EXHAUSTED


# What one change may send: etcd must run with limits at least these
# (--max-request-bytes, --max-txn-ops; the shipped deploy files and the test
# clusters do). A larger change is refused here, before anything is sent.
MAX_TXN_BYTES = 8 * 1024 * 1024
MAX_TXN_OPS = 10_000


@dataclass(frozen=True)
class EtcdTls:
    ca: str
    cert: str | None = None
    key: str | None = None


@dataclass(frozen=True)
class EtcdUrl:
    endpoints: tuple[tuple[str, int], ...]
    prefix: str

    @classmethod
    def parse(cls, text: str) -> EtcdUrl:
        """etcd://HOST:PORT[,HOST:PORT...]/PREFIX"""
        allowed = "etcd://HOST:PORT[,HOST:PORT...]/PREFIX, e.g. etcd://127.0.0.1:2379/railyard"
        if not text.startswith("etcd://"):
            raise StoreUrlError("store", f"{text[:80]!r} is not an etcd URL", allowed)
        hosts, _, prefix = text.removeprefix("etcd://").partition("/")
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", prefix):
            raise StoreUrlError("store", f"prefix {prefix[:80]!r}", "1-64 characters of A-Z a-z 0-9 - _ in " + allowed)
        endpoints = []
        for hostport in hosts.split(","):
            host, _, port = hostport.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise StoreUrlError("store", f"endpoint {hostport[:80]!r} is not HOST:PORT", allowed)
            endpoints.append((host.strip("[]"), int(port)))
        return cls(tuple(endpoints), prefix)


WRITTEN_KEPT = 4096  # own changes a watch can recognise; one arrives within milliseconds of its write


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def stored_key(kv: Mapping) -> str:
    """A key etcd returned, as text (BadStoredValue if it is not UTF-8)."""
    raw = unb64(kv.get("key", ""))
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise BadStoredValue(
            f"etcd key {raw[:64]!r}: not UTF-8 (someone else's key under Railyard's prefix?)"
        ) from None


def _mod(kv: Mapping) -> int:
    return int(kv.get("mod_revision", 0))


def header_revision(reply: Mapping) -> int:
    return int(reply["header"]["revision"])


def prefix_end(prefix: str) -> str:
    raw = prefix.encode()
    return b64(raw[:-1] + bytes([raw[-1] + 1]))


class EtcdKv:
    """etcd's KV and lease calls over its gateway, on whichever endpoint answers."""

    def __init__(
        self,
        url: EtcdUrl,
        tls: EtcdTls | None = None,
        observe: Observe | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.url = url
        self.tls = tls
        protocol = "https" if tls is not None else "http"
        self._clients = [
            etcd3gw.Etcd3Client(
                host=host,
                port=port,
                protocol=protocol,
                ca_cert=tls.ca if tls else None,
                cert_cert=tls.cert if tls else None,
                cert_key=tls.key if tls else None,
                timeout=timeout_s,
                api_path="/v3/",  # etcd >= 3.4; no discovery round trip
            )
            for host, port in url.endpoints
        ]
        self._current = 0
        self._lock = threading.Lock()
        self._observe = observe or (lambda op, seconds, ok: None)

    def call(self, op: str, path: str, body: dict, idempotent: bool = True) -> dict:
        """POST `body` to the gateway's `path`, trying each endpoint once. A
        request that changes something (`idempotent=False`) goes to another
        endpoint only if it could not even connect: once it may have been
        sent, its outcome is unknown (StoreUnavailable says so)."""
        started = time.perf_counter()
        with self._lock:
            first = self._current
        errors = []
        data = json.dumps(body)
        for step in range(len(self._clients)):
            index = (first + step) % len(self._clients)
            client = self._clients[index]
            try:
                reply = client.post(client.get_url(path), data=data)
            except UNANSWERED as exc:
                # No answer, or the member failed on the request (500: etcd's
                # gateway for an error with no gRPC status, as from a member
                # stopping mid-proposal): a change may have landed all the same.
                errors.append(f"{client.host}:{client.port}: {type(exc).__name__}")
                detail = exc.detail_text or ""
                never_sent = "NewConnectionError" in detail or "Connection refused" in detail
                if idempotent or never_sent:
                    continue
                with self._lock:
                    self._current = (index + 1) % len(self._clients)  # the next change tries another member
                self._observe(op, time.perf_counter() - started, False)
                raise StoreUnavailable(
                    f"etcd: {op} sent to {client.host}:{client.port} got no answer; it may or may not have landed"
                ) from None
            except etcd_errors.Etcd3Exception as exc:
                self._observe(op, time.perf_counter() - started, False)
                raise StoreRefused(f"etcd refused {op}: {exc.detail_text or exc}") from None
            with self._lock:
                self._current = index
            self._observe(op, time.perf_counter() - started, True)
            return reply
        self._observe(op, time.perf_counter() - started, False)
        raise StoreUnavailable(f"etcd: no endpoint answered {op} ({'; '.join(errors)})")

    def client(self) -> etcd3gw.Etcd3Client:
        """The member requests go to now (a watch's)."""
        with self._lock:
            return self._clients[self._current]

    def failed(self, client: etcd3gw.Etcd3Client) -> None:
        """`client`'s member did not answer: the next request tries the next one."""
        with self._lock:
            if self._clients[self._current] is client:
                self._current = (self._current + 1) % len(self._clients)

    def range_prefix(self, prefix: str) -> tuple[list[dict], int]:
        """(key-values under `prefix`, the store's revision)."""
        reply = self.call("range", "/kv/range", {"key": b64(prefix), "range_end": prefix_end(prefix)})
        return reply.get("kvs", []), header_revision(reply)

    def get(self, key: str) -> dict | None:
        kvs = self.call("range", "/kv/range", {"key": b64(key)}).get("kvs", [])
        return kvs[0] if kvs else None

    def txn(self, compare: list[dict], success: list[dict], failure: list[dict] | None = None) -> tuple[bool, dict]:
        body = {"compare": compare, "success": success, "failure": failure or []}
        reply = self.call("txn", "/kv/txn", body, idempotent=False)
        return bool(reply.get("succeeded")), reply

    def grant(self, ttl_s: int) -> int:
        # A lease granted twice is harmless: the spare one expires unused.
        return int(self.call("lease", "/lease/grant", {"TTL": ttl_s, "ID": 0})["ID"])

    def keepalive(self, lease: int) -> int:
        """The lease's remaining TTL (0: it expired)."""
        reply = self.call("lease", "/lease/keepalive", {"ID": lease})
        return int(reply.get("result", {}).get("TTL", 0))

    def revoke(self, lease: int) -> None:
        self.call("lease", "/kv/lease/revoke", {"ID": lease})


def put_op(key: str, value: str | bytes, lease: int = 0) -> dict:
    return {"request_put": {"key": b64(key), "value": b64(value), **({"lease": lease} if lease else {})}}


def delete_op(key: str) -> dict:
    return {"request_delete_range": {"key": b64(key)}}


def compare_mod(key: str, revision: int) -> dict:
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": revision}


def compare_create(key: str, revision: int) -> dict:
    return {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": revision}


class EtcdIntentStore:
    def __init__(self, kv: EtcdKv) -> None:
        self.kv = kv
        prefix = kv.url.prefix
        self.intent_prefix = f"{prefix}/intent/"
        self.revision_key = f"{prefix}/revision"
        self.leader_key = f"{prefix}/leader"
        self._base = 0  # mod revision of revision_key as last read or written (0: absent)
        self.fence = 0  # create revision of leader_key that writes require (0: no fence)
        # With replicas, a write without a fence is refused: only a leader writes.
        self.require_fence = False
        self.loaded_at = 0  # the etcd revision of the last load
        self._written: dict[int, None] = {}  # etcd revisions of this store's own changes, oldest first
        self._lock = threading.Lock()

    @property
    def base(self) -> int:
        """The revision key's mod revision as this store last read or wrote it."""
        return self._base

    def followed(self, revision_mod: int) -> None:
        """A follower applied the change at `revision_mod` (from a watch): the
        next write is guarded by it, as if it had been loaded."""
        with self._lock:
            self._base = max(self._base, revision_mod)

    def load(self) -> Snapshot:
        """Every record and the revision, each checked as it is read
        (BadStoredValue names the first bad key). `loaded_at` is the etcd
        revision the snapshot is of: a watch goes on from there."""
        with self._lock:
            kvs, at = self.kv.range_prefix(f"{self.kv.url.prefix}/")
            records: dict[tuple[str, str], Any] = {}
            revision, base = 0, 0
            for kv in kvs:
                key = stored_key(kv)
                if key == self.revision_key:
                    revision, base = stored_revision(f"etcd key {key}", unb64(kv.get("value", ""))), _mod(kv)
                    continue
                record = self.record_of(key)
                if record is not None:
                    records[record] = stored_document(f"etcd key {key}", unb64(kv.get("value", "")))
            self._base = base
            self.loaded_at = at
            return Snapshot(records, revision)

    def record_of(self, key: str) -> tuple[str, str] | None:
        """(kind, name) of an intent record's key; None for any other key."""
        if not key.startswith(self.intent_prefix):
            return None
        kind, _, name = key.removeprefix(self.intent_prefix).partition("/")
        return kind, name

    def changed(self) -> bool:
        """Whether the intent moved since this store last read or wrote it (a follower's poll)."""
        kv = self.kv.get(self.revision_key)
        return (_mod(kv) if kv else 0) != self._base

    def current(self, revision_mod: int) -> bool:
        """Whether `revision_mod` (the revision key's mod revision a follower
        has applied) is the store's: then it holds every intent change."""
        kv = self.kv.get(self.revision_key)
        return (_mod(kv) if kv else 0) == revision_mod

    def apply(self, change: Change, revision: int) -> None:
        with self._lock:
            if self.require_fence and not self.fence:
                raise StoreConflict("this replica holds no leadership to write under; nothing was written")
            compare = [compare_mod(self.revision_key, self._base)]
            if self.fence:
                compare.append(compare_create(self.leader_key, self.fence))
            ops = [put_op(self._key(k, n), json.dumps(doc, sort_keys=True)) for (k, n), doc in change.puts.items()]
            ops += [delete_op(self._key(k, n)) for k, n in change.deletes]
            ops.append(put_op(self.revision_key, str(revision)))
            size = sum(len(json.dumps(op)) for op in ops)
            if len(ops) > MAX_TXN_OPS or size > MAX_TXN_BYTES:
                raise StoreRefused(
                    f"a change of {len(ops)} records ({size} bytes) is over what one etcd transaction may carry "
                    f"here ({MAX_TXN_OPS} records, {MAX_TXN_BYTES} bytes); nothing was written"
                )
            ok, reply = self.kv.txn(compare, ops)
            if not ok:
                raise StoreConflict(
                    "the intent in etcd changed under this controller (another writer, or its leadership "
                    "ended); nothing was written"
                )
            self._base = header_revision(reply)
            self._written[self._base] = None  # a watch skips its own writes: this replica holds them already
            if len(self._written) > WRITTEN_KEPT:
                del self._written[next(iter(self._written))]

    def wrote(self, at: int) -> bool:
        """Whether the change at etcd revision `at` is one of this store's own writes."""
        return at in self._written

    def _key(self, kind: str, name: str) -> str:
        return f"{self.intent_prefix}{kind}/{name}"

    def close(self) -> None:
        pass  # HTTP sessions close with the process; no lock to let go (etcd arbitrates writers)
