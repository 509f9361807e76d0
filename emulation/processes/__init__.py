"""Processes run beside the fabric: the controller daemon as a child process, a
local Prometheus.
"""
