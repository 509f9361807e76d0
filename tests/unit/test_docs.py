"""The documentation names only what exists. README.md and docs/*.md are read
as a user would follow them: every `railyard` command line must parse with the
real parser (its subcommands, flags and choices), every file path, make target,
metric, environment variable, shipped spec or scenario and link must exist,
and every alert's runbook_url must land on a section. A page that drifts from
the code fails here, naming the page, the line and what it names."""

from __future__ import annotations

import argparse
import itertools
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from controller.cli.main import _parser
from controller.fabric.spec import SPECS_DIR
from emulation.workload import available

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
# The pages a user follows: the front page, docs/, and the other guides.
DOCS = [README, *PAGES, ROOT / "ARCHITECTURE.md", ROOT / "CONTRIBUTING.md", ROOT / "deploy/slurm/README.md"]
MAX_README_LINES = 250
# Paths the docs name as places a command writes, not files of the repository.
OUTPUTS = ("bench/results/", "reports/")
# Flags of other programs that the docs name on their own (etcd's).
FOREIGN_FLAGS = {"--max-request-bytes", "--max-txn-ops"}
# File names the docs use as examples of a user's own files.
EXAMPLE_FILES = {"fabric.yaml", "hosts.yaml", "topology.yaml", "topology.conf", "railyard.yaml", "tokens.yaml"}
REPO_ROOTS = ("docs", "controller", "emulation", "deploy", "grafana", "proto", "tests", "bench", ".ci")


# --- reading the pages ---------------------------------------------------------


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines()


def code(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every code block line and inline code span."""
    fenced, output = False, False
    for number, line in enumerate(lines_of(path), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            output = line.strip() == "```text"  # what a program printed, not what to type
            continue
        if fenced:
            if not output:
                yield number, line
        else:
            for span in re.findall(r"`([^`]+)`", line.replace("\\|", "|")):
                yield number, span


def command_lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Every `railyard ...` invocation, as argv after `railyard`, up to a shell separator."""
    pending, start = "", 0
    for number, text in code(path):
        if pending:
            text, number = pending + " " + text, start
        if text.rstrip().endswith("\\"):
            pending, start = text.rstrip()[:-1], number
            continue
        pending = ""
        for match in re.finditer(r"(?:^|[\s;&|(`$])(?:\S*bin/)?railyard(?=\s|$)(.*)", text):
            rest = re.split(r"\s(?:#|\||&&|;|&|>|2>)\s?|\s&$|\s[|&;]\s", " " + match.group(1) + " ")[0]
            try:
                argv = shlex.split(rest.replace("[", " ").replace("]", " "))
            except ValueError:
                argv = rest.split()
            argv = [a for a in argv if a not in ("...", "|")]
            if argv:  # the command's name alone, in prose
                yield number, argv


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def every_option(parser: argparse.ArgumentParser) -> set[str]:
    options = {o for a in parser._actions for o in a.option_strings}
    for sub in subparsers(parser).values():
        options |= every_option(sub)
    return options


def check_command(argv: list[str]) -> str | None:
    """What is wrong with `railyard ARGV` as the real parser reads it; None if nothing."""
    parser = _parser()
    top = {o for a in parser._actions for o in a.option_strings}
    path: list[str] = []
    while (choices := subparsers(parser)) and argv and not argv[0].startswith("-"):
        word, argv = argv[0], argv[1:]
        if word.isupper():  # a placeholder: `railyard COMMAND --help`
            return None
        if word not in choices:
            return f"`railyard {' '.join(path)}` has no command {word!r}"
        path.append(word)
        parser = choices[word]
    if subparsers(parser) and not set(argv) & {"--help", "-h", "--version"}:
        return f"`railyard {' '.join(path)}` needs a command"
    known = {o for a in parser._actions for o in a.option_strings} | top
    for word in argv:
        flag = word.split("=", 1)[0]
        if flag.startswith("-") and flag not in known and not re.fullmatch(r"-\d.*", flag):
            return f"`railyard {' '.join(path)}` has no option {flag}"
    allowed = [list(a.choices) for a in parser._actions if not a.option_strings and a.choices]
    words = [w for w in argv if not w.startswith("-")]
    if allowed and words and words[0].islower() and words[0] not in allowed[0]:
        return f"`railyard {' '.join(path)}` takes {sorted(allowed[0])}, not {words[0]!r}"
    return None


# --- what exists -----------------------------------------------------------------


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z][\w-]*):", text, re.MULTILINE))


def metric_names() -> set[str]:
    # Metrics counts events; the link view's series are computed at scrape time from telemetry,
    # the heap's from malloc's counters.
    defined_in = ("controller/metrics.py", "controller/telemetry/link_view.py", "controller/runtime/heap.py")
    source = "".join((ROOT / p).read_text() for p in defined_in)
    names = set(re.findall(r'"(railyard_[a-z_]+)"', source))
    return names | {n + suffix for n in names for suffix in ("_total", "_bucket", "_sum", "_count")}


def repo_files() -> set[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return {Path(p).name for p in listed.split()} | {p.name for p in ROOT.rglob("*") if ".venv" not in p.parts}


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (its text, without the #s)."""
    text = re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in lines_of(path) if line.startswith("#")}


# --- the checks --------------------------------------------------------------------


REPO_PATH = re.compile(r"(?<![\w/.-])((?:%s)/[\w./*#-]*[\w*/])" % "|".join(map(re.escape, REPO_ROOTS)))  # noqa: UP031
SOURCES = [*(ROOT / "controller").rglob("*.py"), *(ROOT / "deploy").rglob("*.sh")]


def command_problems(path: Path) -> Iterator[str]:
    """Each `railyard` command line against the real parser, and the shipped
    scenarios and specs it names."""
    where = path.relative_to(ROOT)
    specs = {p.name for p in SPECS_DIR.glob("*.yaml")}
    scenarios = set(available())
    for number, argv in command_lines(path):
        wrong = check_command(argv)
        if wrong:
            yield f"{where}:{number}: {wrong}"
        for word, name in itertools.pairwise(argv):
            shipped = name.islower() and "/" not in name
            runs = word == "--workload" or (argv[:2] == ["scenario", "run"] and word == "run")
            if runs and shipped and name not in scenarios:
                yield f"{where}:{number}: no shipped scenario {name!r}"
            spec = name.removesuffix(".yaml") + ".yaml"
            if word == "--spec" and shipped and spec not in specs and name not in EXAMPLE_FILES:
                yield f"{where}:{number}: no shipped spec {name!r}"


def code_problems(path: Path) -> Iterator[str]:
    """Make targets, metrics, environment variables, flags and file names in code."""
    where = path.relative_to(ROOT)
    options = every_option(_parser()) | FOREIGN_FLAGS
    targets, metrics, files = make_targets(), metric_names(), repo_files()
    sources = "\n".join(p.read_text() for p in SOURCES)
    for number, text in code(path):
        for target in re.findall(r"(?:^|\s)make ([a-z][\w-]*)", text):
            if target not in targets:
                yield f"{where}:{number}: no make target {target!r}"
        for metric in re.findall(r"\brailyard_[a-z_]+", text):
            if metric not in metrics:
                yield f"{where}:{number}: no metric {metric}"
        for variable in re.findall(r"\bRAILYARD_[A-Z_]+\b", text):
            if variable not in sources:
                yield f"{where}:{number}: no environment variable {variable}"
        if re.fullmatch(r"--[a-z][\w-]*", text) and text not in options:
            yield f"{where}:{number}: no option {text}"
        for name in re.findall(r"^([\w.-]+\.(?:yaml|yml|json|conf|sh|service))$", text):
            if name not in files and name not in EXAMPLE_FILES:
                yield f"{where}:{number}: no file {name}"


def path_problems(path: Path) -> Iterator[str]:
    """Repository paths (with their #sections) and relative links, anywhere on the page."""
    where = path.relative_to(ROOT)
    for number, line in enumerate(lines_of(path), 1):
        for ref in REPO_PATH.findall(line):
            file, _, anchor = ref.partition("#")
            if file.startswith(OUTPUTS):
                continue
            found = list(ROOT.glob(file)) if "*" in file else [ROOT / file] if (ROOT / file).exists() else []
            if not found:
                yield f"{where}:{number}: no file {file}"
            elif anchor and anchor not in anchors(found[0]):
                yield f"{where}:{number}: {file} has no section #{anchor}"
        for link in re.findall(r"\]\(([^)#]+)", line):
            if not link.startswith(("http://", "https://")) and not (path.parent / link).exists():
                yield f"{where}:{number}: a link to {link}, which does not exist"


def problems(path: Path) -> list[str]:
    return [*command_problems(path), *code_problems(path), *path_problems(path)]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_flag_file_target_and_metric_a_page_names_exists(path):
    found = problems(path)
    assert not found, "\n".join(found)


def test_the_readme_is_a_front_page_and_lists_every_page():
    lines = lines_of(README)
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; at most {MAX_README_LINES}"
    listed = set(re.findall(r"^\| (docs/[\w.-]+\.md) \|", README.read_text(), re.MULTILINE))
    pages = {str(p.relative_to(ROOT)) for p in PAGES}
    assert pages <= listed, f"pages the README's table of contents leaves out: {pages - listed}"
    assert listed <= pages, f"pages the README lists that do not exist: {listed - pages}"


def test_every_alerts_runbook_url_lands_on_a_section_of_the_docs():
    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())["groups"][0]["rules"]
    for rule in rules:
        file, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert (ROOT / file).is_file() and anchor in anchors(ROOT / file), rule["alert"]
        assert anchor == rule["alert"].lower()


def test_the_check_can_fail():
    """A broken reference of each kind is caught."""
    assert check_command(["export", "slurm-tree", "--no-such-flag"]) == "`railyard export` has no option --no-such-flag"
    assert check_command(["expotr", "kueue"]) == "`railyard ` has no command 'expotr'"
    assert check_command(["export", "kueue-v2"]) is not None
    assert check_command(["controller"]) is not None
    assert check_command(["controller", "run", "--grpc-listen", "127.0.0.1:1"]) is None
    assert slug("### RailyardNoLeader") == "railyardnoleader" and slug("Two commands") == "two-commands"
