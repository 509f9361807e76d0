"""bench.hedera's verdict on TE against ECMP: a run where TE changed no
route had the hash's routing, so its reading below ECMP is two emulated
runs of one routing, listed apart; a run where TE acted and ended below
ECMP fails the target."""

from __future__ import annotations

from typing import Any

from bench.hedera import summary


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
