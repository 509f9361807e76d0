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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from controller.errors import HostError
from controller.intent.model import RecordKind

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Change:
    """One atomic change: upserts and deletes of (kind, name) records."""

    puts: Mapping[tuple[RecordKind, str], dict]
    deletes: frozenset[tuple[RecordKind, str]] = frozenset()


@dataclass(frozen=True)
class Snapshot:
    # Keyed by the kinds as stored: a kind this version does not know is
    # reported by loading.py, not dropped here.
    records: Mapping[tuple[str, str], dict]
    revision: int
    unreadable: tuple[tuple[str, str], ...] = ()  # records whose body is not JSON: skipped, left in the store


class StoreError(HostError):
    """The store cannot be used: said in one line, never as a traceback."""


class StoreInUse(StoreError):
    pass


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


class SqliteIntentStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
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
        with self._lock:
            rows = self._db.execute("SELECT kind, name, body FROM intent ORDER BY kind, name").fetchall()
            revision = self._db.execute("SELECT value FROM meta WHERE key = 'revision'").fetchone()[0]
        records, unreadable = {}, []
        for kind, name, body in rows:
            try:
                records[(kind, name)] = json.loads(body)
            except (TypeError, ValueError):
                unreadable.append((kind, name))  # one bad record must not stop the rest from loading
        return Snapshot(records, revision, tuple(unreadable))

    def apply(self, change: Change, revision: int) -> None:
        with self._lock:
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
                raise

    def close(self) -> None:
        with self._lock:
            self._db.close()
            if self._held >= 0:
                os.close(self._held)  # the lock goes with it; the file stays (removing it would race a new holder)
                self._held = -1
