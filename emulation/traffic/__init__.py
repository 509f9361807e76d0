"""Generating and measuring traffic: iperf3 flows, port counters and the
switches' own ECMP choice, probes.
"""
