"""The controller installs with `pip install .` (deploy/Dockerfile, the
systemd unit, docs/deployment.md): every module of the `controller` package
imports with the extras' packages (sim, test, lint) out of reach."""

import json
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
# Development tools inside the package, never imported by what it runs.
DEVELOPMENT_ONLY = {"controller.api.codegen"}  # `make proto`: grpcio-tools, from the test extra

BLOCKED_IMPORTS = """
import importlib, importlib.abc, json, pkgutil, sys
blocked, skipped = (set(names) for names in json.loads(sys.argv[1]))

class Extras(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"{name} comes with an extra, not with `pip install .`")
        return None

sys.meta_path.insert(0, Extras())
import controller
failed = []
for module in pkgutil.walk_packages(controller.__path__, "controller."):
    if module.name in skipped or module.name.endswith(".__main__"):  # __main__ runs the CLI
        continue
    try:
        importlib.import_module(module.name)
    except ModuleNotFoundError as exc:
        failed.append(f"{module.name}: {exc}")
print("\\n".join(failed))
"""


def _names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def extras_only_imports() -> set[str]:
    """Top-level import names whose every distribution comes with an extra alone."""
    from importlib.metadata import packages_distributions

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = _names(project["dependencies"])
    extras = set().union(*(_names(reqs) for reqs in project["optional-dependencies"].values())) - core
    return {name for name, dists in packages_distributions().items() if {canonicalize_name(d) for d in dists} <= extras}


def test_the_controller_imports_with_none_of_the_extras_installed():
    blocked = extras_only_imports()
    assert {"matplotlib", "pytest", "hypothesis"} <= blocked  # the check sees the extras it guards against
    out = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORTS, json.dumps([sorted(blocked), sorted(DEVELOPMENT_ONLY)])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip() == ""
