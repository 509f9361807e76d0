"""PlacementService: jobs for schedulers."""

from __future__ import annotations

from controller.api.errors import rpc, stream_guard
from controller.api.gen.railyard.v1 import placement_pb2 as pb
from controller.api.gen.railyard.v1 import placement_pb2_grpc as pb_grpc
from controller.api.paging import encode_token, page
from controller.api.watch import BoundedWatch, WatchSlots
from controller.errors import FieldError, NotFound, shown
from controller.fabric import Fabric
from controller.fabric import addressing as ad
from controller.intent.events import JobEvent, JobEventKind
from controller.intent.service import IntentService
from controller.schedulers.hosts import HostMap
from controller.te.jobs import Job, JobError, JobFlow, JobRequest, Pattern

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
    JobEventKind.PROGRAMMED: pb.JobEvent.KIND_PROGRAMMED,
}
MAX_WATCHERS = 4  # each watch holds a server thread
MAX_REASON_CHARS = 500  # of an infeasible candidate's reason: 64 of them share one reply
WATCH_QUEUE = 1024


def request_from_proto(msg: pb.PlaceJobRequest, hosts: HostMap | None = None) -> JobRequest:
    """The request, its servers named as Railyard does (a scheduler may send node names)."""
    if msg.pattern not in PATTERNS:
        name = pb.CollectivePattern.Name(msg.pattern) if msg.pattern in pb.CollectivePattern.values() else msg.pattern
        raise JobError("pattern", f"{name} is not a pattern", ", ".join(pb.CollectivePattern.Name(v) for v in PATTERNS))
    return JobRequest(
        job_id=msg.job_id,
        gpu_count=msg.gpu_count,
        pattern=PATTERNS[msg.pattern],
        flow_gbps=msg.flow_bandwidth_gbps,
        gpus_per_server=msg.gpus_per_server,
        servers=tuple(hosts.resolve(s) for s in msg.servers) if hosts else tuple(msg.servers),
        max_pods=msg.max_pods,
        exclusive=msg.exclusive_servers,
        request_id=msg.request_id,
        max_predicted_utilization=msg.max_predicted_utilization,
        qps_per_connection=msg.qps_per_connection or 1,
    )


def job_to_proto(fabric: Fabric, job: Job, hosts: HostMap | None = None) -> pb.Job:
    """The job's summary (JOB_VIEW_SUMMARY): all but its flows, which a full
    view adds only once it is known to fit (PlacementServicer._fitting).
    Servers are named as the scheduler's nodes (`hosts`) too."""
    hosts = hosts or HostMap.identity(fabric)
    r = job.request
    request = pb.PlaceJobRequest(
        job_id=r.job_id,
        gpu_count=r.gpu_count,
        gpus_per_server=r.gpus_per_server,
        servers=[hosts.node(s) for s in r.servers],
        pattern=PATTERN_ENUMS[r.pattern],
        flow_bandwidth_gbps=r.flow_gbps,
        max_pods=r.max_pods,
        exclusive_servers=r.exclusive,
        request_id=r.request_id,
        max_predicted_utilization=r.max_predicted_utilization,
        qps_per_connection=r.qps_per_connection,
    )
    out = pb.Job(
        job_id=job.job_id,
        request=request,
        pods=list(job.pods),
        predicted_max_utilization_ratio=job.predicted_max_utilization,
        cross_cluster_share=job.cross_cluster_share,
    )
    out.place_time.FromNanoseconds(int(job.placed_at * 1e9))
    for gpu in job.gpus:
        nic = gpu.nic
        server = ad.server_name(nic.pod, nic.server)
        out.gpus.add(
            rank=gpu.rank,
            server=server,
            node=hosts.node(server),
            pod=nic.pod,
            rail=nic.rail,
            nic_address=ad.nic_ip(nic),
            leaf=fabric.attachment(nic).node,
        )
    out.flow_count = len(job.flows)
    return out


def flow_to_proto(flow: JobFlow) -> pb.JobFlow:
    return pb.JobFlow(
        src_address=ad.nic_ip(flow.src),
        dst_address=ad.nic_ip(flow.dst),
        bandwidth_gbps=flow.demand_bps / 1e9,
        spine=flow.via,
        src_port=flow.src_port,
    )


def _flows_bytes(job: Job) -> int:
    """The flows' encoded size in a full Job, counted, not built: a million of
    them would take seconds to encode only to find they do not fit."""
    total = 0
    for flow in job.flows:
        body = 2 + len(ad.nic_ip(flow.src)) + 2 + len(ad.nic_ip(flow.dst)) + 9 + (2 + len(flow.via) if flow.via else 0)
        total += body + 1 + (1 if body < 128 else 2)  # the field's tag and length
    return total


REPLY_MARGIN_BYTES = 4096  # the status, trailers and framing around a reply's message


class ReplyTooLarge(FieldError):
    context = "request"


def _flow_key(index: int) -> str:
    return f"{index:09d}"  # page tokens order keys as text


class PlacementServicer(pb_grpc.PlacementServiceServicer):
    def __init__(self, service: IntentService, metrics, message_bytes: int, hosts: HostMap | None = None) -> None:
        self.service = service
        self.hosts = hosts or HostMap.identity(service.fabric)
        self.metrics = metrics
        self._watchers = WatchSlots(MAX_WATCHERS, f"at most {MAX_WATCHERS} concurrent WatchJobs streams")
        self.reply_bytes = message_bytes - REPLY_MARGIN_BYTES  # what a reply's message may take

    def _job(self, job: Job) -> pb.Job:
        out = job_to_proto(self.service.fabric, job, self.hosts)
        out.programmed_revision = self.service.programmed_revision(job)
        return out

    def _fitting(self, job: Job, view: int) -> pb.Job:
        """The job in `view`, or ReplyTooLarge (naming the view) if that would
        not fit the message limit: checked before a mutation commits, so no
        change is ever answered with an error."""
        full = view == pb.JOB_VIEW_FULL
        summary = self._job(job)
        size = summary.ByteSize() + (_flows_bytes(job) if full else 0)
        if size > self.reply_bytes:
            raise ReplyTooLarge(
                "view",
                f"job {job.job_id}'s reply would be {size} bytes, over the {self.reply_bytes}-byte limit for a reply",
                "JOB_VIEW_SUMMARY, with the flows paged by ListJobFlows"
                if full
                else "a larger limit (--max-message-bytes): even its summary does not fit",
            )
        if full:
            summary.flows.extend(flow_to_proto(flow) for flow in job.flows)
        return summary

    def _event(self, event: JobEvent) -> pb.JobEvent:
        return pb.JobEvent(kind=EVENT_KINDS[event.kind], job=self._job(event.job), intent_revision=event.revision)

    @rpc
    def PlaceJob(self, request, context):
        replies: dict[str, pb.Job] = {}

        def admit(job: Job) -> None:  # before the commit: a reply that cannot go out refuses the change
            replies[job.job_id] = self._fitting(job, request.view)

        job, created = self.service.place_job(
            request_from_proto(request, self.hosts), admit=admit, validate_only=request.validate_only
        )
        reply = replies.get(job.job_id) or self._fitting(job, request.view)  # a retry's: nothing committed
        return pb.PlaceJobResponse(
            job=reply,
            created=created,
            oversubscribed=job.predicted_max_utilization > 1.0,
            validated_only=request.validate_only,
        )

    @rpc
    def ScorePlacements(self, request, context):
        job = request_from_proto(request.job, self.hosts)
        candidates = []
        for i, candidate in enumerate(request.candidates):
            if not 1 <= len(candidate.servers) <= len(self.service.fabric.servers):
                raise JobError(
                    f"candidates[{i}].servers",
                    f"{len(candidate.servers)} servers",
                    f"1 to {len(self.service.fabric.servers)} (the fabric's)",
                )
            candidates.append(tuple(self.hosts.resolve(name) for name in candidate.servers))
        scores, revision = self.service.score_placements(job, candidates)
        return pb.ScorePlacementsResponse(
            scores=[
                pb.PlacementScore(
                    candidate=s.candidate,
                    feasible=s.job is not None,
                    reason=s.reason[:MAX_REASON_CHARS],
                    predicted_max_utilization_ratio=s.predicted_max_utilization,
                    spine_tier_peak_ratio=s.spine_tier_peak,
                    score=s.score,
                    rank=s.rank,
                    cross_cluster_share=s.cross_cluster_share,
                )
                for s in scores
            ],
            intent_revision=revision,
        )

    @rpc
    def ReleaseJob(self, request, context):
        replies: list[pb.Job] = []
        self.service.release_job(
            request.job_id, admit=lambda job: replies.append(self._fitting(job, pb.JOB_VIEW_SUMMARY))
        )
        return pb.ReleaseJobResponse(job=replies[0])

    @rpc
    def GetJob(self, request, context):
        return pb.GetJobResponse(job=self._fitting(self.service.get_job(request.job_id), request.view))

    @rpc
    def ListJobs(self, request, context):
        snapshot = self.service.snapshot()
        jobs = [job for _, job in sorted(snapshot.jobs.items())]
        scope = f"ListJobs:{request.view}"
        items, token = page(jobs, request.page_size, request.page_token, key=lambda j: j.job_id, scope=scope)
        # A page also ends before the message limit: the token then points after its last job.
        out: list[pb.Job] = []
        size = 0
        for i, job in enumerate(items):
            reply = self._fitting(job, request.view)
            size += reply.ByteSize() + 8
            if out and size > self.reply_bytes:
                token = encode_token(scope, items[i - 1].job_id)
                break
            out.append(reply)
        return pb.ListJobsResponse(jobs=out, next_page_token=token, intent_revision=snapshot.revision)

    @rpc
    def ListJobFlows(self, request, context):
        snapshot = self.service.snapshot()
        job = snapshot.jobs.get(request.job_id)
        if job is None:
            raise NotFound(f"no job {shown(request.job_id)}")
        # Bound to this placement of the job: a token from an earlier one (released, placed again) is refused.
        scope = f"ListJobFlows:{job.job_id}:{job.placed_at!r}"
        indices, token = page(
            range(len(job.flows)),
            request.page_size,
            request.page_token,
            key=_flow_key,
            scope=scope,
            default=1000,
            most=10_000,
        )
        return pb.ListJobFlowsResponse(
            flows=[flow_to_proto(job.flows[i]) for i in indices],
            next_page_token=token,
            intent_revision=snapshot.revision,
        )

    @stream_guard
    def WatchJobs(self, request, context):
        with self._watchers.held(context):
            watch: BoundedWatch[JobEvent] = BoundedWatch(WATCH_QUEUE)
            wanted = set(JobEventKind) - (set() if request.include_programmed else {JobEventKind.PROGRAMMED})

            def listener(_intent, new_events):
                for event in new_events:
                    if event.kind in wanted:
                        watch.put(event)

            if request.HasField("since_revision"):
                replay = self.service.watch_from(request.since_revision, listener)
            else:
                replay = []
                self.service.subscribe(listener)
            watch.end_with(context)
            try:
                for past in replay:
                    if past.kind in wanted:
                        yield self._event(past)
                behind = (
                    f"watcher fell {WATCH_QUEUE} events behind; watch again since the last revision it saw "
                    "(or list again, if that is gone)"
                )
                for event in watch.follow(context, behind):
                    yield self._event(event)
            finally:
                self.service.unsubscribe(listener)
