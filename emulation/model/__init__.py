"""Pure flow-level model of the fabric: max-min fair rates and the optimum a
scenario is judged against.
"""
