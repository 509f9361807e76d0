"""Test doubles: a switch that speaks real OpenFlow 1.3 (fake_switch.py) and a
fixed TE plan (static_te.py)."""

from tests.fakes.fake_switch import Applied, FakeDatapath, FakeSwitch, MeterMod
from tests.fakes.static_te import StaticTe

__all__ = ["Applied", "FakeDatapath", "FakeSwitch", "MeterMod", "StaticTe"]
