"""The layer rules (import-linter contracts in pyproject.toml) hold, and the
check is real: the same rules fail on a copy of the tree with one forbidden
import added."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_tree_keeps_every_layer_rule():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # the pure fabric model reaching up into intent (a lower layer importing a higher one)
        ("controller/fabric/model.py", "import controller.intent.model", "controller layers"),
        # the pure TE core touching switches
        ("controller/te/load.py", "import os_ken.ofproto.ofproto_v1_3", "the pure core does no I/O"),
        # the controller reaching into the emulation
        ("controller/api/paging.py", "import emulation.net.ovs", "the controller never imports the emulation"),
        # a module new to the simulator: the pure-core rule names packages, so it holds from the first line
        ("emulation/simulate/newcomer.py", "import socket", "the pure core does no I/O"),
    ],
)
def test_a_forbidden_import_breaks_the_check(tmp_path, module, line, broken):
    for part in ("controller", "emulation", "bench"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    before = target.read_text() if target.exists() else ""
    target.write_text(before + f"\n{line}  # added by the test\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert f"{broken}" in result.stdout and "BROKEN" in result.stdout, result.stdout
