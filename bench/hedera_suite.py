"""Hedera's testbed benchmark suite (Al-Fares et al., NSDI 2010), as
Railyard scenarios: the authors' own input files and their measured
results, converted once and vendored under emulation/scenarios/hedera/.

The source is the public repository mininet/mininet-tests, folder
hedera/hedera/, at commit SOURCE_COMMIT ("hedera load generator and
hardware results", N. Handigol, 2012-06-06):
- inputs/*_data: one line per flow, `src_ip dst_ip dst_port TCP seed start
  stop size ...`; every flow is one long-lived TCP flow (100 GB, 0-60 s);
- hedera_results.csv: per pattern, aggregate Mb/s over the 16 hosts for the
  non-blocking switch ("Control"), ECMP, Global First Fit and Simulated
  Annealing, read as bench/hedera.py's columns.

Hedera's k=4 fat tree addresses host h (2 or 3) of edge switch e in pod p
as 10.p.e.h; Railyard's fat-tree builder numbers the same host NicId(0, p,
2e + h - 2), address 10.0.p.(2e + h - 1). Regenerate the vendored files
from a checkout of that commit:

    python -m bench.hedera_suite PATH/TO/hedera/hedera
"""

from __future__ import annotations

import argparse
import csv
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from controller.fabric import NicId
from controller.fabric import addressing as ad
from emulation.workload.parse import SCENARIOS_DIR

SOURCE_REPOSITORY = "mininet/mininet-tests"
SOURCE_COMMIT = "ce4045417249dfa9f2a247f53da0f22362587bfa"
SUITE_DIR = SCENARIOS_DIR / "hedera"
RESULTS_FILE = SUITE_DIR / "hedera_results.csv"
DURATION_S = 20.0
HOSTS_PER_EDGE = 2


@dataclass(frozen=True)
class Pattern:
    """One of Hedera's patterns: its label in their results, its input
    file, and the scenario name it has here (names allow no parentheses)."""

    label: str
    source: str
    name: str


def _patterns() -> list[Pattern]:
    out = [Pattern(f"rand{k}", f"random{k}_data", f"rand{k}") for k in range(4)]
    out.append(Pattern("random4", "random4_data", "random4"))
    out += [Pattern(f"randbij{k}", f"random{k}_bij_data", f"randbij{k}") for k in range(5)]
    out += [Pattern(f"randx{n}", f"random_{n}_flows_data", f"randx{n}") for n in range(2, 6)]
    out.append(Pattern("hotspot", "hotspot_one_to_one_data", "hotspot"))
    out.append(Pattern("stag(1,0)", "stag_prob_0_1_0_data", "stag-1-0"))
    for edge, pod in (("0.2", "0.3"), ("0.5", "0.3")):
        digits = f"{edge[-1]}_{pod[-1]}"
        out += [
            Pattern(f"stag{k}({edge},{pod})", f"stag_prob_{k}_{digits}_data", f"stag{k}-{edge}-{pod}") for k in range(5)
        ]
    out += [Pattern(f"stride{i}", f"stride{i}_data", f"stride{i}") for i in (1, 2, 4, 8)]
    return out


PATTERNS = _patterns()


@dataclass(frozen=True)
class Published:
    """Hedera's testbed figures for one pattern, aggregate Mb/s."""

    nonblocking: float
    ecmp: float
    gff: float
    sa: float


def published() -> dict[str, Published]:
    """Hedera's results by pattern label, from the vendored CSV."""
    with RESULTS_FILE.open(newline="") as f:
        return {row[0]: Published(*(float(v) for v in row[1:5])) for row in csv.reader(f) if row}


_HOST = re.compile(r"^10\.([0-3])\.([01])\.([23])$")


def hedera_host(address: str) -> str:
    """Hedera's 10.pod.edge.host as the Railyard fat-tree NIC address."""
    m = _HOST.match(address)
    if not m:
        raise ValueError(f"{address!r} is not a host of Hedera's k=4 fat tree (10.<0-3>.<0-1>.<2-3>)")
    pod, edge, host = (int(g) for g in m.groups())
    return ad.nic_ip(NicId(0, pod, HOSTS_PER_EDGE * edge + host - 2))


def convert(pattern: Pattern, text: str) -> dict:
    """A Hedera input file as a scenario: its flows, unbounded TCP for the run."""
    flows = []
    for line in text.splitlines():
        fields = line.split()
        if not fields or line.startswith("#"):
            continue
        if fields[3] != "TCP":
            raise ValueError(f"{pattern.source}: flow {line!r} is not TCP")
        flows.append({"src": hedera_host(fields[0]), "dst": hedera_host(fields[1])})
    return {
        "name": pattern.name,
        "description": (
            f"Hedera's {pattern.label} ({len(flows)} long-lived TCP flows), from {pattern.source} of "
            f"{SOURCE_REPOSITORY} at {SOURCE_COMMIT[:12]} (hedera/hedera/inputs), hosts renamed for Railyard's fat tree"
        ),
        "fabric": "fat-tree-k4.yaml",
        "duration_s": DURATION_S,
        "traffic": [{"flows": flows}],
    }


def write_suite(source: Path) -> None:
    SUITE_DIR.mkdir(exist_ok=True)
    for pattern in PATTERNS:
        scenario = convert(pattern, (source / "inputs" / pattern.source).read_text())
        out = SUITE_DIR / f"{pattern.name}.yaml"
        out.write_text(yaml.safe_dump(scenario, sort_keys=False, width=100))
    RESULTS_FILE.write_text((source / "hedera_results.csv").read_text())
    print(f"wrote {len(PATTERNS)} scenarios and {RESULTS_FILE.name} to {SUITE_DIR}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="hedera/hedera of mininet/mininet-tests at SOURCE_COMMIT")
    write_suite(parser.parse_args().source)


if __name__ == "__main__":
    main()
