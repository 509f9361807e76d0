"""Emulated rail-optimized RoCE-like fabric (Mininet + Open vSwitch, userspace
datapath), its traffic, scenarios and the processes run beside it.
"""
