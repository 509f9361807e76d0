"""The house's size rules (CONTRIBUTING.md): no module over 400 lines
(generated protobuf code aside), no function over 80, in controller/,
emulation/ and bench/. A file past either is a sign to split it along a
real seam, not to raise the limit."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("controller", "emulation", "bench")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80

# Modules being split; delete a line once its module holds the rules
# (test_every_exemption_is_still_needed says when).
EXEMPT: set[str] = set()


def _sources(root: Path) -> list[Path]:
    return sorted(
        p
        for package in PACKAGES
        for p in (root / package).rglob("*.py")
        if "_pb2" not in p.name  # generated
    )


def oversized(path: Path, root: Path) -> list[str]:
    """Each rule the file breaks: the module's length, and each function's
    (from its first decorator to its last line, nested ones included)."""
    source = path.read_text()
    name = path.relative_to(root).as_posix()
    found = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{name}: {lines} lines (at most {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(source, filename=name)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = node.end_lineno - first + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{name}:{node.lineno} {node.name}: {length} lines (at most {MAX_FUNCTION_LINES})")
    return found


def test_no_module_over_400_lines_and_no_function_over_80():
    broken = [
        problem
        for path in _sources(ROOT)
        if path.relative_to(ROOT).as_posix() not in EXEMPT
        for problem in oversized(path, ROOT)
    ]
    assert not broken, "split along a real seam:\n" + "\n".join(broken)


def test_every_exemption_is_still_needed():
    for name in sorted(EXEMPT):
        assert (ROOT / name).is_file(), f"{name} is gone: delete its line in EXEMPT"
        assert oversized(ROOT / name, ROOT), f"{name} holds the rules now: delete its line in EXEMPT"


def test_the_rules_see_long_modules_and_functions(tmp_path):
    package = tmp_path / "controller"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    (package / "long.py").write_text(f"@staticmethod\ndef long():\n{body}\n" + "\n" * 319)
    (package / "short.py").write_text(f"def short():\n{body[: body.rindex(chr(10))]}\n")
    (package / "thing_pb2.py").write_text("\n" * 500)
    assert [p.name for p in _sources(tmp_path)] == ["long.py", "short.py"]
    assert oversized(package / "long.py", tmp_path) == [
        "controller/long.py: 401 lines (at most 400)",
        "controller/long.py:2 long: 82 lines (at most 80)",
    ]
    assert oversized(package / "short.py", tmp_path) == []
