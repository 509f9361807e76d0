"""Pure flow-level model of the fabric: max-min fair rates and the optimum a
run is judged against.

- optimum.py      the API: splittable and single-path optima, throughput bound, rates of a given routing
- network.py      capacities after an outage; flows as commodities and interchangeable bundles
- lp.py           progressive filling by LPs (HiGHS) with routing chosen by the optimiser
- symmetry.py     interchangeable spines merged for the LP (exact)
- single_path.py  the best one-path-per-flow routing: the LP rounded, or exhaustive when small
- fair.py         progressive filling on a fixed routing
"""
