"""Test doubles: a switch that speaks real OpenFlow 1.3 (fake_switch.py), where
packets leave its tables and cross a fabric of them (forwarding.py), a
controller's southbound against them (reconciler_rig.py) and a fixed TE plan
(static_te.py)."""

from tests.fakes.fake_switch import Applied, FakeDatapath, FakeSwitch, MeterMod
from tests.fakes.static_te import StaticTe

__all__ = ["Applied", "FakeDatapath", "FakeSwitch", "MeterMod", "StaticTe"]
