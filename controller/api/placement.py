"""PlacementService: jobs for schedulers."""

from __future__ import annotations

import queue
import threading

import grpc

from controller.api.errors import rpc, stream_guard
from controller.api.gen.railyard.v1 import placement_pb2 as pb
from controller.api.gen.railyard.v1 import placement_pb2_grpc as pb_grpc
from controller.api.paging import page
from controller.fabric import Fabric
from controller.fabric import addressing as ad
from controller.intent.service import IntentService, JobEvent, JobEventKind
from controller.te.jobs import Job, JobError, JobRequest, Pattern

PATTERNS = {
    pb.COLLECTIVE_PATTERN_RING: Pattern.RING,
    pb.COLLECTIVE_PATTERN_TREE: Pattern.TREE,
    pb.COLLECTIVE_PATTERN_ALL_TO_ALL: Pattern.ALL_TO_ALL,
}
PATTERN_ENUMS = {v: k for k, v in PATTERNS.items()}
EVENT_KINDS = {
    JobEventKind.PLACED: pb.JobEvent.KIND_PLACED,
    JobEventKind.MOVED: pb.JobEvent.KIND_PATHS_MOVED,
    JobEventKind.RELEASED: pb.JobEvent.KIND_RELEASED,
}
MAX_WATCHERS = 4  # each watch holds a server thread
WATCH_QUEUE = 1024


def request_from_proto(msg: pb.PlaceJobRequest) -> JobRequest:
    if msg.pattern not in PATTERNS:
        name = pb.CollectivePattern.Name(msg.pattern) if msg.pattern in pb.CollectivePattern.values() else msg.pattern
        raise JobError("pattern", f"{name} is not a pattern", ", ".join(pb.CollectivePattern.Name(v) for v in PATTERNS))
    return JobRequest(
        job_id=msg.job_id,
        gpu_count=msg.gpu_count,
        pattern=PATTERNS[msg.pattern],
        flow_gbps=msg.flow_bandwidth_gbps,
        gpus_per_server=msg.gpus_per_server,
        servers=tuple(msg.servers),
        max_pods=msg.max_pods,
        exclusive=msg.exclusive_servers,
        request_id=msg.request_id,
    )


def job_to_proto(fabric: Fabric, job: Job) -> pb.Job:
    r = job.request
    request = pb.PlaceJobRequest(
        job_id=r.job_id,
        gpu_count=r.gpu_count,
        gpus_per_server=r.gpus_per_server,
        servers=list(r.servers),
        pattern=PATTERN_ENUMS[r.pattern],
        flow_bandwidth_gbps=r.flow_gbps,
        max_pods=r.max_pods,
        exclusive_servers=r.exclusive,
        request_id=r.request_id,
    )
    out = pb.Job(
        job_id=job.job_id,
        request=request,
        pods=list(job.pods),
        predicted_max_utilization_ratio=job.predicted_max_utilization,
    )
    out.place_time.FromNanoseconds(int(job.placed_at * 1e9))
    for gpu in job.gpus:
        nic = gpu.nic
        out.gpus.add(
            rank=gpu.rank,
            server=ad.server_name(nic.pod, nic.server),
            pod=nic.pod,
            rail=nic.rail,
            nic_address=ad.nic_ip(nic),
            leaf=fabric.attachment(nic).node,
        )
    for flow in job.flows:
        out.flows.add(
            src_address=ad.nic_ip(flow.src),
            dst_address=ad.nic_ip(flow.dst),
            bandwidth_gbps=flow.demand_bps / 1e9,
            spine=flow.via,
        )
    return out


class PlacementServicer(pb_grpc.PlacementServiceServicer):
    def __init__(self, service: IntentService, metrics) -> None:
        self.service = service
        self.metrics = metrics
        self._watchers = threading.BoundedSemaphore(MAX_WATCHERS)

    def _job(self, job: Job) -> pb.Job:
        return job_to_proto(self.service.fabric, job)

    @rpc
    def PlaceJob(self, request, context):
        job, created = self.service.place_job(request_from_proto(request))
        return pb.PlaceJobResponse(job=self._job(job), created=created)

    @rpc
    def ReleaseJob(self, request, context):
        return pb.ReleaseJobResponse(job=self._job(self.service.release_job(request.job_id)))

    @rpc
    def GetJob(self, request, context):
        return pb.GetJobResponse(job=self._job(self.service.get_job(request.job_id)))

    @rpc
    def ListJobs(self, request, context):
        jobs = [job for _, job in sorted(self.service.snapshot().jobs.items())]
        items, token = page(jobs, request.page_size, request.page_token, key=lambda j: j.job_id, scope="ListJobs")
        return pb.ListJobsResponse(jobs=[self._job(j) for j in items], next_page_token=token)

    @stream_guard
    def WatchJobs(self, request, context):
        if not self._watchers.acquire(blocking=False):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"at most {MAX_WATCHERS} concurrent WatchJobs streams")
        events: queue.Queue[JobEvent | None] = queue.Queue(maxsize=WATCH_QUEUE)
        overflow = threading.Event()

        def listener(_intent, new_events):
            for event in new_events:
                try:
                    events.put_nowait(event)
                except queue.Full:
                    overflow.set()  # a watcher that cannot keep up is cut off, not buffered forever

        self.service.subscribe(listener)
        context.add_callback(lambda: events.put(None) if not events.full() else overflow.set())
        try:
            while context.is_active():
                if overflow.is_set():
                    context.abort(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"watcher fell {WATCH_QUEUE} events behind; re-list with ListJobs and watch again",
                    )
                try:
                    event = events.get(timeout=1.0)
                except queue.Empty:
                    continue
                if event is None:
                    return
                yield pb.JobEvent(
                    kind=EVENT_KINDS[event.kind], job=self._job(event.job), intent_revision=event.revision
                )
        finally:
            self.service.unsubscribe(listener)
            self._watchers.release()
