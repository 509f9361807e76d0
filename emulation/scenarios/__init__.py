"""Scenarios: the YAML format (shipped files beside this module), the runner
(ECMP, then TE) and the report.
"""
