"""The intent store: the only thing Railyard keeps on disk.

`IntentStore` is the interface (a distributed store such as etcd can
implement it later); `SqliteIntentStore` is the embedded default. Records are
(kind, name) -> JSON document plus one revision number, written in a single
transaction per change, so a crash (even kill -9) leaves either the old or
the new intent, never half of it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Change:
    """One atomic change: upserts and deletes of (kind, name) records."""

    puts: Mapping[tuple[str, str], dict]
    deletes: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Snapshot:
    records: Mapping[tuple[str, str], dict]
    revision: int


class StoreError(Exception):
    pass


class IntentStore(Protocol):
    def load(self) -> Snapshot: ...

    def apply(self, change: Change, revision: int) -> None:
        """Durably applies `change` and records `revision`; all or nothing."""
        ...

    def close(self) -> None: ...


class SqliteIntentStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE below).
        self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # a change the API acknowledged survives power loss
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise StoreError(f"{self.path}: schema version {version}, this Railyard knows {SCHEMA_VERSION}")
        self._db.executescript(f"""
            CREATE TABLE IF NOT EXISTS intent (
                kind TEXT NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (kind, name));
            CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
            INSERT OR IGNORE INTO meta VALUES ('revision', 0);
            PRAGMA user_version = {SCHEMA_VERSION};
        """)

    def load(self) -> Snapshot:
        with self._lock:
            rows = self._db.execute("SELECT kind, name, body FROM intent ORDER BY kind, name").fetchall()
            revision = self._db.execute("SELECT value FROM meta WHERE key = 'revision'").fetchone()[0]
        return Snapshot({(k, n): json.loads(b) for k, n, b in rows}, revision)

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
