"""Ways to place a workload's jobs (expand's `place`). Pure."""

from __future__ import annotations

from controller.fabric import Fabric
from controller.te.jobs import Drains, Job, JobRequest
from controller.te.load import Load, add_job
from controller.te.placement import FabricState, NoCapacity, Usage, place
from emulation.workload.expand import Placed, Placer


def placed(job: Job) -> Placed:
    return Placed(tuple(g.nic for g in job.gpus), tuple((f.src, f.dst, f.via, f.src_port) for f in job.flows))


def railyard_placer(fabric: Fabric, jobs: dict[str, Job] | None = None) -> Placer:
    """Railyard's placement, one request after another with the state the
    intent service keeps between them (the jobs so far, their predicted
    load, the GPU ledger). `jobs`, if given, collects the placed jobs."""
    state_jobs: dict[str, Job] = {} if jobs is None else jobs
    jobs_bps: Load = {}
    usage = Usage()

    def place_one(request: JobRequest) -> Placed | None:
        try:
            job = place(fabric, FabricState(dict(state_jobs), Drains(), {}, jobs_bps, usage), request, 0.0)
        except NoCapacity:
            return None
        state_jobs[job.job_id] = job
        add_job(fabric, jobs_bps, job)
        usage.add(job)
        return placed(job)

    return place_one
