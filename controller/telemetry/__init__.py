"""Telemetry ingest: validated samples from agents, through a bounded queue,
into the live link view.
"""
