"""The controller process: wiring of every part (daemon) and the TE loop that
feeds the engine's moves to the reconciler.
"""
