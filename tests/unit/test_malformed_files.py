"""A corpus of malformed files, as a new user or a hostile one writes them:
fabric specs, scenarios and intent stores. Every one is refused by the
command that reads it with exit status 2 and one line naming the file or
the field, none with a traceback, none taking over 2 s."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller.cli.main import main

CORPUS = Path(__file__).parent.parent / "data" / "malformed"
SPECS = sorted((CORPUS / "spec").iterdir())
SCENARIOS = sorted((CORPUS / "scenario").iterdir())
LIMIT_S = 2.0
# Timed: run without coverage's tracer (pytest-cov), which slows the parser
# threefold and would measure the tracer, not the refusal.
pytestmark = pytest.mark.no_cover


def refused_in_one_line(argv: list[str], capsys) -> str:
    started = time.monotonic()
    assert main(argv) == 2
    elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    assert elapsed < LIMIT_S, (argv, elapsed)
    assert err.count("\n") == 1 and err.startswith("railyard: ") and "Traceback" not in err + out, err
    return err


def test_the_corpus_is_large_enough():
    assert len(SPECS) + len(SCENARIOS) + len(STORES) >= 30


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_a_malformed_spec_is_one_line_and_exit_2(path, capsys):
    err = refused_in_one_line(["fabric", "show", "--spec", str(path)], capsys)
    assert "fabric spec: '" in err


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_a_malformed_scenario_is_one_line_and_exit_2(path, capsys):
    # Refused before any fabric comes up (this needs no Open vSwitch), and the
    # simulator refuses the same file the same way: one format, two engines.
    err = refused_in_one_line(["scenario", "run", str(path)], capsys)
    assert "scenario: '" in err
    if path.name not in EMULATION_ONLY:
        assert refused_in_one_line(["simulate", "--workload", str(path), "--out", "/nonexistent"], capsys) == err


EMULATION_ONLY = {"udp-iterations.yaml"}  # fine for the fluid model: it needs no PFC to finish an iteration


def _sqlite(path: Path, *statements: str) -> None:
    db = sqlite3.connect(path)
    for statement in statements:
        db.execute(statement)
    db.commit()
    db.close()


def _truncated(path: Path) -> None:
    _sqlite(path, "CREATE TABLE t (a)")
    path.write_bytes(path.read_bytes()[:100])


ANY_FREE_PORTS = ("--grpc-listen", "127.0.0.1:0", "--openflow-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
STORES = {
    "random-bytes": lambda p: p.write_bytes(bytes(range(256)) * 20),
    "text": lambda p: p.write_text("railyard intent\n"),
    "someone-elses-database": lambda p: _sqlite(p, "CREATE TABLE accounts (id, balance)"),
    "wrong-columns": lambda p: _sqlite(p, "CREATE TABLE intent (a)", "CREATE TABLE meta (k, v)"),
    "future-schema": lambda p: _sqlite(p, "PRAGMA user_version = 99"),
    "truncated": lambda p: _truncated(p),
    "a-directory": lambda p: p.mkdir(),
}


@pytest.mark.parametrize("name", sorted(STORES))
def test_a_malformed_store_stops_the_daemon_in_one_line_with_exit_2(name, tmp_path):
    store = tmp_path / "intent.db"
    STORES[name](store)
    before = sorted(p.name for p in tmp_path.iterdir())
    started = time.monotonic()
    # A real daemon process: a store that slipped through would start serving
    # (ports 0: whatever is free), and the timeout would fail the test.
    proc = subprocess.run(
        [sys.executable, "-m", "controller.cli", "controller", "run", "--store", str(store), *ANY_FREE_PORTS],
        capture_output=True,
        text=True,
        timeout=20,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(store) in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    assert elapsed < LIMIT_S + 1.0, elapsed  # a second for the interpreter to start
    # Nothing was written into somebody's file (its lock file aside).
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == before
