"""The flow-level what-if simulator: a scenario (emulation.workload, the format
the emulation runs too) on any fabric spec, run on a vectorised max-min
fluid model with ECMP (the underlay's 5-tuple hash), ideal packet spraying
and the real TE engine in a closed loop, each judged against the optimum.
`railyard simulate`; `make bench-scale`, `make bench-training`.

- traffic.py     the scenario -> each placement's flows (emulation.workload.expand)
- placers.py     first-fit and topology-aware placement (Railyard's is the real one)
- routes.py      links by index, every flow's candidate routes, the ECMP hash
- acks.py        where TCP's ACKs go: hashed at the far leaf, or steered
- prepared.py    an arm's routes, hashes and ACKs; ECMP and spraying as routings
- conditions.py  the fabric over time: dead links and switches, drains; phases
- timeline.py    the fluid model over time: windows, bursts, iterations, completions
- sensor.py      telemetry as the agent reports it from a timeline's interval
- loop.py        the closed loop: timeline -> telemetry -> engine step -> overlay -> routing
- flowmods.py    the flow-mods each TE cycle's reconcile pass would send
- arms.py        the arms of a comparison; the baselines' runs between events
- figures.py     rates, aggregate and collided uplinks of a routing
- bound.py       the goodput optimum (emulation.model.optimum) per phase
- jobbound.py    a job iteration's optimum: exact LP, or cut bounds
- goodput.py     unbounded flows judged by aggregate against the optimum
- iterations.py  iteration times per job and arm against the optimum
- run.py         one simulation: every arm, judged by goodput or by time
- records.py     the result as typed records, written as the JSON they name
- report*.py     the tables; output.py (the only I/O) writes JSON and the PNG
"""
