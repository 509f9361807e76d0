"""TeService: the TE engine's decisions, streamed as they are made.

`DecisionFeed` keeps the last decisions (bounded) and hands each new one to
every watcher's bounded queue; a watcher that falls behind is cut off, not
buffered forever (api/watch.py, as WatchJobs). A decision arrives here in the shape of
the engine's `Decision` with its typed fields (flow, link, from_via,
to_via); runtime/te_feed.py fills them from the TE runner.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass

from controller.api.errors import stream_guard
from controller.api.fabric import PROTOCOL_NAMES
from controller.api.gen.railyard.v1 import te_pb2 as pb
from controller.api.gen.railyard.v1 import te_pb2_grpc as pb_grpc
from controller.api.watch import BoundedWatch, WatchSlots
from controller.te.view import FlowKey

HISTORY = 1024
WATCH_QUEUE = 4096
MAX_WATCHERS = 16
_PROTOCOLS: dict[str, int] = {name: int(number) for number, name in PROTOCOL_NAMES.items()}


@dataclass(frozen=True)
class TeEvent:
    kind: str
    subject: str
    reason: str
    at: float
    flow: FlowKey | None = None
    link: str | None = None
    from_via: str | None = None
    to_via: str | None = None
    programmed: bool = True  # False: advisory, the switches were not touched


class DecisionFeed:
    def __init__(self, history: int = HISTORY) -> None:
        self._lock = threading.Lock()
        self._recent: collections.deque[TeEvent] = collections.deque(maxlen=history)
        self._listeners: list[Callable[[TeEvent], None]] = []

    def publish(self, event: TeEvent) -> None:
        with self._lock:
            self._recent.append(event)
            listeners = list(self._listeners)
        for listener in listeners:
            listener(event)

    def subscribe(self, listener: Callable[[TeEvent], None]) -> list[TeEvent]:
        """Adds `listener`; the decisions kept so far, for a replay."""
        with self._lock:
            self._listeners.append(listener)
            return list(self._recent)

    def unsubscribe(self, listener: Callable[[TeEvent], None]) -> None:
        with self._lock:
            self._listeners.remove(listener)


def decision_to_proto(event: TeEvent) -> pb.TeDecision:
    out = pb.TeDecision(
        kind=event.kind,
        subject=event.subject,
        reason=event.reason,
        link=event.link or "",
        from_via=event.from_via or "",
        to_via=event.to_via or "",
        programmed=event.programmed,
    )
    out.at.FromNanoseconds(int(event.at * 1e9))
    if event.flow is not None:
        src, dst, protocol, sport, dport = event.flow
        out.flow.src_address, out.flow.dst_address = src, dst
        out.flow.protocol = _PROTOCOLS.get(protocol, 0)  # type: ignore[assignment]  # an enum value
        out.flow.src_port, out.flow.dst_port = sport, dport
    return out


class TeServicer(pb_grpc.TeServiceServicer):
    def __init__(self, feed: DecisionFeed) -> None:
        self.feed = feed
        self._watchers = WatchSlots(MAX_WATCHERS, f"at most {MAX_WATCHERS} concurrent WatchDecisions")

    @stream_guard
    def WatchDecisions(self, request, context):
        with self._watchers.held(context):
            watch: BoundedWatch[TeEvent] = BoundedWatch(WATCH_QUEUE)
            recent = self.feed.subscribe(watch.put)
            watch.end_with(context)
            try:
                if request.include_recent:
                    for event in recent:
                        yield pb.WatchDecisionsResponse(decision=decision_to_proto(event))
                for event in watch.follow(context, f"watcher fell {WATCH_QUEUE} decisions behind"):
                    yield pb.WatchDecisionsResponse(decision=decision_to_proto(event))
            finally:
                self.feed.unsubscribe(watch.put)
