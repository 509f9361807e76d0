"""The intent store: the only thing Railyard keeps on disk.

`IntentStore` is the interface (a distributed store such as etcd can
implement it later); `SqliteIntentStore` is the embedded default. Records are
(kind, name) -> JSON document plus one revision number, written in a single
transaction per change, so a crash (even kill -9) leaves either the old or
the new intent, never half of it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from controller.errors import HostError, Status

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Change:
    """One atomic change: upserts and deletes of (kind, name) records. A
    writer names kinds by RecordKind; a change read back from the store (a
    follower's watch) carries them as stored, a kind this version does not
    know included."""

    puts: Mapping[tuple[str, str], dict]
    deletes: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Snapshot:
    # Keyed by the kinds as stored: a kind this version does not know is
    # reported by loading.py, not dropped here.
    records: Mapping[tuple[str, str], dict]
    revision: int


class StoreError(HostError):
    """The store cannot be used: said in one line, never as a traceback. To
    an API caller, UNAVAILABLE: retry once it is repaired."""

    status = Status.UNAVAILABLE


class StoreInUse(StoreError):
    pass


class BadStoredValue(StoreError):
    """A value in the store is not what Railyard wrote there (edited by hand,
    another program): named by its key or record. Nothing is loaded past it:
    a record that cannot be read may hold GPUs or steer traffic, and guessing
    would hand them out twice."""


SHOWN_BYTES = 40  # of a bad stored value, in its error


def _shown(raw: object) -> str:
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    return repr(text[:SHOWN_BYTES]) + ("..." if len(text) > SHOWN_BYTES else "")


def stored_revision(where: str, raw: object) -> int:
    """The intent revision stored at `where`: a whole number >= 0."""
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    if isinstance(text, str) and text.strip().isdigit() and text.strip().isascii():
        return int(text)
    raise BadStoredValue(f"{where}: {_shown(raw)} is not an intent revision (a whole number >= 0)")


def stored_document(where: str, raw: object) -> dict:
    """The JSON object stored at `where`."""
    try:
        doc = json.loads(raw) if isinstance(raw, str | bytes) else None
    except (ValueError, UnicodeDecodeError):
        doc = None
    if not isinstance(doc, dict):
        raise BadStoredValue(f"{where}: {_shown(raw)} is not a Railyard record (a JSON object)")
    return doc


class IntentStore(Protocol):
    def load(self) -> Snapshot: ...

    def apply(self, change: Change, revision: int) -> None:
        """Durably applies `change` and records `revision`; all or nothing."""
        ...

    def close(self) -> None: ...


def _hold(path: Path) -> int:
    """An exclusive lock on `path`.lock for as long as this process keeps the
    descriptor (the kernel drops it when the process dies, kill -9 included):
    one writer per store. Two writers would each hand out the same GPUs."""
    lock_path = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StoreError(f"{lock_path}: cannot open the store's lock file: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise StoreInUse(
            f"{path} is in use by another Railyard controller (pid {holder}): one controller per store"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


_TABLES = {"intent": ["kind", "name", "body"], "meta": ["key", "value"]}


Observe = Callable[[str, float, bool], None]  # (operation, seconds, ok): the store's latency metric


class SqliteIntentStore:
    def __init__(self, path: str | Path, observe: Observe | None = None) -> None:
        self.path = Path(path)
        # Each change's transaction, fsync of the WAL included: a placement
        # waits for it, so the disk's tail is the API's (docs/benchmarks.md).
        self._observe = observe or (lambda op, seconds, ok: None)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{self.path.parent}: cannot create the store's directory: {exc.strerror}") from None
        if self.path.exists() and self.path.stat().st_size == 0:
            log.warning("%s is empty (0 bytes): starting with no intent", self.path)
        self._held = _hold(self.path)
        self._lock = threading.Lock()
        try:
            self._db = self._open()
        except sqlite3.Error as exc:
            os.close(self._held)
            raise StoreError(f"{self.path}: not a usable Railyard store ({exc})") from None
        except BaseException:
            os.close(self._held)
            raise

    def _open(self) -> sqlite3.Connection:
        # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE below).
        db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")  # a change the API acknowledged survives power loss
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            db.close()
            raise StoreError(f"{self.path}: schema version {version}, this Railyard knows {SCHEMA_VERSION}")
        tables = {
            name: [column[1] for column in db.execute(f"PRAGMA table_info({name})")]
            for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        # A new store has no tables yet; anything else is somebody's database,
        # which this must neither write into nor misread.
        if tables and tables != _TABLES:
            db.close()
            found = "; ".join(f"{t}({', '.join(c)})" for t, c in sorted(tables.items()))
            raise StoreError(f"{self.path}: a SQLite database, but not a Railyard store (tables: {found})")
        db.executescript(f"""
            CREATE TABLE IF NOT EXISTS intent (
                kind TEXT NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (kind, name));
            CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
            INSERT OR IGNORE INTO meta VALUES ('revision', 0);
            PRAGMA user_version = {SCHEMA_VERSION};
        """)
        return db

    def load(self) -> Snapshot:
        """Every record and the revision, each checked as it is read (BadStoredValue names the first bad one)."""
        with self._lock:
            try:
                rows = self._db.execute("SELECT kind, name, body FROM intent ORDER BY kind, name").fetchall()
                found = self._db.execute("SELECT value FROM meta WHERE key = 'revision'").fetchone()
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: cannot read the intent ({exc})") from None
        if found is None:
            raise BadStoredValue(f"{self.path}: meta.revision is missing")
        revision = stored_revision(f"{self.path}: meta.revision", found[0])
        records = {}
        for kind, name, body in rows:
            if not isinstance(kind, str) or not isinstance(name, str):
                raise BadStoredValue(
                    f"{self.path}: a record named {_shown(kind)}/{_shown(name)} (kind and name are text)"
                )
            records[(kind, name)] = stored_document(f"{self.path}: record {kind}/{name}", body)
        return Snapshot(records, revision)

    def apply(self, change: Change, revision: int) -> None:
        with self._lock:
            started = time.perf_counter()
            try:
                self._db.execute("BEGIN IMMEDIATE")
                for (kind, name), doc in change.puts.items():
                    self._db.execute(
                        "INSERT OR REPLACE INTO intent VALUES (?, ?, ?)", (kind, name, json.dumps(doc, sort_keys=True))
                    )
                for kind, name in change.deletes:
                    self._db.execute("DELETE FROM intent WHERE kind = ? AND name = ?", (kind, name))
                self._db.execute("UPDATE meta SET value = ? WHERE key = 'revision'", (revision,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                self._observe("commit", time.perf_counter() - started, False)
                raise
            self._observe("commit", time.perf_counter() - started, True)

    def close(self) -> None:
        with self._lock:
            self._db.close()
            if self._held >= 0:
                os.close(self._held)  # the lock goes with it; the file stays (removing it would race a new holder)
                self._held = -1
