"""PlaceJob's retry key (`request_id`), as the payment APIs keep theirs:

- a retry must repeat its original request: the same key with other
  parameters is refused, naming the first that differs;
- the key outlives the job: for RETRY_WINDOW_S after a release, a late retry
  of the original call gets the original outcome (the job as placed,
  created=false), not a second job.

Pure: documents in, documents out; the service stores them as "retired"
records, so a restart keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from controller.errors import shown
from controller.te.jobs import Job, JobError, JobRequest, job_from_doc, job_to_doc

RETRY_WINDOW_S = 3600.0
MAX_RETIRED = 10_000  # keys kept at most; the oldest go first
_COMPARED = tuple(f.name for f in fields(JobRequest) if f.name not in ("job_id", "request_id"))


@dataclass(frozen=True)
class Retired:
    """A released job whose placement had a retry key."""

    job: Job
    released_at: float

    @property
    def request_id(self) -> str:
        return self.job.request.request_id

    def live(self, now: float) -> bool:
        return now - self.released_at <= RETRY_WINDOW_S


def check_same_request(original: JobRequest, retry: JobRequest) -> None:
    """Raises JobError (field `request_id`) if the retry asks for something else."""
    for name in _COMPARED:
        first, now = getattr(original, name), getattr(retry, name)
        if first != now:
            raise JobError(
                "request_id",
                f"{shown(retry.request_id)} was first used for job {shown(original.job_id)} with "
                f"{name}={first!r}; this request has {name}={now!r}",
                "the original request's parameters (a retry repeats its call), or a new request_id",
            )


def retired_to_doc(retired: Retired) -> dict[str, Any]:
    return {"released_at": retired.released_at, "job": job_to_doc(retired.job)}


def retired_from_doc(job_id: str, doc: Mapping[str, Any]) -> Retired:
    return Retired(job_from_doc(job_id, doc["job"]), float(doc["released_at"]))
