"""Pure traffic engineering: jobs and their collective patterns, placement,
path assignment, link loads, the live link view and the adaptive engine.
"""
