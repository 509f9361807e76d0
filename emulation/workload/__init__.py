"""The workload format (scenario v2): one YAML file drives both the emulation
(`railyard scenario run`) and the flow-level simulator (`railyard simulate`).

- `model`: the frozen dataclasses a file becomes;
- `parse`: YAML -> model, every error naming its field (`items`: the traffic
  items; `values`: one value's checks);
- `events`: the events, parsed, then checked against a fabric;
- `expand`: a workload on a fabric and a seed -> the concrete flows and the
  jobs' iteration plans both engines run (`placers`: Railyard's placement for it).
"""

from emulation.workload.model import Workload, WorkloadError
from emulation.workload.parse import (
    SCENARIOS_DIR,
    available,
    load_workload,
    parse_workload,
    spec_file,
    workload_from_dict,
)

__all__ = [
    "SCENARIOS_DIR",
    "Workload",
    "WorkloadError",
    "available",
    "load_workload",
    "parse_workload",
    "spec_file",
    "workload_from_dict",
]
