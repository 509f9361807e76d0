"""bench.hedera's verdict on TE against ECMP: a run where TE changed no
route had the hash's routing, so its reading below ECMP is two emulated
runs of one routing, listed apart; a run where TE acted and ended below
ECMP fails the target. And which per-run targets one run misses (what
--keep-misses keeps a run's artefacts for)."""

from __future__ import annotations

from typing import Any

from bench.hedera import misses, summary


def _run(seed: int, te: float, ecmp: float, actions: int) -> dict[str, Any]:
    emulated = {"te": te, "ecmp": ecmp, "te_actions": actions, "path_changes_per_flow_max": 1, "te_routing": None}
    return {"seed": seed, "emulated": emulated, "difference_points": {"ecmp": 0.0, "te": 0.0}}


def _pattern(name: str, *runs: dict[str, Any]) -> dict[str, Any]:
    return {"pattern": name, "hedera": {"ecmp": 0.5, "gff": 0.9, "sa": 0.95}, "runs": list(runs)}


def test_a_run_below_ecmp_without_acting_is_listed_apart_and_keeps_the_target() -> None:
    out = summary([_pattern("stride1", _run(1, 0.9889, 0.9890, 0), _run(2, 0.99, 0.98, 3))], emulate=True)

    assert out["te_below_ecmp"] == []
    assert out["te_below_ecmp_without_acting"] == [("stride1", 1)]
    assert out["targets"]["te_never_below_ecmp"]


def test_a_run_below_ecmp_after_acting_fails_the_target() -> None:
    out = summary([_pattern("randbij1", _run(1, 0.90, 0.95, 4))], emulate=True)

    assert out["te_below_ecmp"] == [("randbij1", 1)]
    assert not out["targets"]["te_never_below_ecmp"]


def test_a_run_misses_its_patterns_own_floor_and_the_shared_targets() -> None:
    def run(te: float, ecmp: float = 0.6, actions: int = 3, changes: int = 1) -> dict[str, Any]:
        return {"te": te, "ecmp": ecmp, "te_actions": actions, "path_changes_per_flow_max": changes}

    assert misses("hotspot", run(0.96)) == []
    assert misses("randbij1", run(0.96)) == ["TE 96.0% < 97%"]  # randbij and strides are held to 97%
    assert misses("stride1", run(0.98, ecmp=0.99, actions=0)) == []  # the hash's own routing
    assert misses("stride1", run(0.98, ecmp=0.99)) == ["TE 98.0% < ECMP 99.0% after acting"]
    assert misses("randx5", run(0.94, changes=3)) == ["TE 94.0% < 95%", "3 path changes of one flow > 2"]
