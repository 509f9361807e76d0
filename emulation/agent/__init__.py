"""The telemetry agent: samples the emulated switches and streams telemetry to
the controller.
"""
