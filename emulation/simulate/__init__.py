"""The flow-level what-if simulator: a workload on any fabric spec, run on a
vectorised max-min fluid model with ECMP (the underlay's 5-tuple hash),
ideal packet spraying and the real TE engine in a closed loop, each judged
against the exact optimum. `railyard simulate`; `make bench-scale`.

- workload.py  the YAML format, validated (WorkloadError names the field)
- traffic.py   workload -> flows with 5-tuples; job mixes placed first-fit or by Railyard
- routes.py    links by index, every flow's candidate routes, the ECMP hash
- figures.py   rates, aggregate and collided uplinks of a routing
- loop.py      the closed loop: model -> telemetry -> engine step -> overlay -> paths
- flowmods.py  the flow-mods each TE cycle's reconcile pass would send
- bound.py     the optimum (emulation.model.optimum) the runs are judged against
- run.py       one simulation: baselines, optimum per phase, the loop, the summary
- report.py    the table; output.py (the only I/O) writes JSON and the PNG
"""
