"""Building and tearing down the emulated fabric: Mininet/OVS bridges,
namespaces, links and shaping, the ECMP underlay, cleanup.
"""
