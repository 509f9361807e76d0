"""Emulated rail-optimized RoCE-like fabric: Mininet + Open vSwitch (userspace datapath)."""
