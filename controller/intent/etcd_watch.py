"""Following the intent on etcd change by change: a watch on the prefix,
read as one `StoredChange` per etcd revision (one leader transaction).

A follower applies each change as it comes (IntentService.follow) instead
of reading the whole prefix again: at 150 changes a second a reload each
time kept followers 100 revisions behind, on as much CPU as the leader.

The watch runs over etcd's gateway (a streamed POST of JSON lines). It
ends, and is opened again from where it stopped, when it has been quiet
for a while: a watch on a member that went silent (no FIN) is never
trusted for longer than that.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import requests

from controller.intent.etcd_store import EtcdIntentStore, StoreUnavailable, b64, prefix_end, stored_key, unb64
from controller.intent.store import Change, StoreError, stored_document, stored_revision

QUIET_S = 2.0  # a watch with nothing to say for this long is closed and opened again
CONNECT_TIMEOUT_S = 2.0


class Compacted(StoreError):
    """etcd no longer holds the history the watch asked for: load it all again."""


@dataclass(frozen=True)
class StoredChange:
    at: int  # the etcd revision of the transaction
    change: Change  # the intent records it put and deleted
    revision: int | None  # the intent revision it wrote (None: it wrote none, e.g. someone else's put)
    leader: bool = False  # it touched the leader key: the election looks at once

    @property
    def empty(self) -> bool:
        """It changed no intent (a leader key's change, say)."""
        return self.revision is None and not self.change.puts and not self.change.deletes


def watch(store: EtcdIntentStore, start: int, quiet_s: float = QUIET_S) -> Iterator[StoredChange]:
    """Each change under the store's prefix from etcd revision `start`, in
    order, as it happens. Returns once quiet for `quiet_s`; raises
    StoreUnavailable when no member answers, Compacted when `start` is
    gone, BadStoredValue (naming the key) when a value does not decode."""
    kv = store.kv
    prefix = f"{kv.url.prefix}/"
    body = json.dumps(
        {"create_request": {"key": b64(prefix), "range_end": prefix_end(prefix), "start_revision": start}}
    )
    client = kv.client()
    try:
        reply = client.session.post(
            client.get_url("/watch"), data=body, stream=True, timeout=(CONNECT_TIMEOUT_S, quiet_s)
        )
    except requests.RequestException as exc:
        kv.failed(client)
        raise StoreUnavailable(f"etcd: cannot watch at {client.host}:{client.port} ({type(exc).__name__})") from None
    with reply:
        if reply.status_code != 200:
            kv.failed(client)
            raise StoreUnavailable(f"etcd: watch at {client.host}:{client.port} answered HTTP {reply.status_code}")
        try:
            for line in _lines(reply):
                yield from _changes(store, line)
        except requests.exceptions.ConnectionError as exc:
            if "Read timed out" in str(exc):
                return  # quiet: the caller opens it again
            raise StoreUnavailable(
                f"etcd: the watch at {client.host}:{client.port} broke ({type(exc).__name__})"
            ) from None
        except requests.RequestException as exc:
            raise StoreUnavailable(
                f"etcd: the watch at {client.host}:{client.port} broke ({type(exc).__name__})"
            ) from None


def _lines(reply: requests.Response) -> Iterator[bytes]:
    pending = b""
    for chunk in reply.iter_content(chunk_size=None):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from (line for line in lines if line.strip())


def _changes(store: EtcdIntentStore, line: bytes) -> Iterator[StoredChange]:
    try:
        result = json.loads(line).get("result") or {}
    except (ValueError, AttributeError):
        raise StoreUnavailable(f"etcd: a watch answer that is not JSON: {line[:80]!r}") from None
    if result.get("canceled"):
        compacted = int(result.get("compact_revision", 0) or 0)
        if compacted:
            raise Compacted(f"etcd compacted its history past revision {compacted}")
        raise StoreUnavailable(f"etcd cancelled the watch: {result.get('cancel_reason', 'no reason given')}")
    by_revision: dict[int, list[dict]] = {}
    for event in result.get("events") or ():
        kv = event.get("kv") or {}
        by_revision.setdefault(int(kv.get("mod_revision", 0)), []).append(event)
    for at, events in sorted(by_revision.items()):
        yield _change(store, at, events)


def _change(store: EtcdIntentStore, at: int, events: list[dict]) -> StoredChange:
    puts: dict[tuple[str, str], dict] = {}
    deletes: set[tuple[str, str]] = set()
    revision, leader = None, False
    for event in events:
        kv = event["kv"]
        key = stored_key(kv)
        deleted = event.get("type") == "DELETE"
        if key == store.leader_key:
            leader = True
            continue
        if key == store.revision_key:
            revision = 0 if deleted else stored_revision(f"etcd key {key}", unb64(kv.get("value", "")))
            continue
        record = store.record_of(key)
        if record is None:
            continue
        if deleted:
            deletes.add(record)
            puts.pop(record, None)
        else:
            puts[record] = stored_document(f"etcd key {key}", unb64(kv.get("value", "")))
            deletes.discard(record)
    return StoredChange(at, Change(puts, frozenset(deletes)), revision, leader)
