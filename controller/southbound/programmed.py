"""When a job is on the fabric (PROGRAMMED), the pure half: from what each
switch was last in sync with, which jobs every switch they use now holds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controller.intent.model import Intent
from controller.southbound.overlay import OverlayEntry
from controller.te.jobs import Job


@dataclass
class JobProgress:
    """A job as it stands, the revision of the first pass that saw it so,
    and whether every switch it uses has held it since."""

    job: Job
    since: int
    programmed: bool = False


def programmed_now(
    progress: dict[str, JobProgress],
    intent: Intent,
    entries: Mapping[str, tuple[Job, list[OverlayEntry]]],
    synced: Mapping[str, int],
) -> list[tuple[Job, int]]:
    """Brings `progress` up to `intent` (a pass just planned from it) and
    returns the jobs programmed by now, each with that intent's revision.

    A job is programmed once every switch carrying one of its `entries` was in
    sync (`synced`: switch -> the revision of its last pass in sync) with a
    pass at least as new as the first that saw the job as it stands. A job
    whose flows need no entry is programmed by the first pass that sees it."""
    done = []
    for job_id, job in intent.jobs.items():
        state = progress.get(job_id)
        if state is None or state.job is not job:  # placed, or moved: its entries changed
            state = progress[job_id] = JobProgress(job, intent.revision)
        if state.programmed:
            continue
        switches = {entry.switch for entry in entries[job_id][1]}
        if all(synced.get(name, -1) >= state.since for name in switches):
            state.programmed = True
            done.append((job, intent.revision))
    for job_id in progress.keys() - intent.jobs.keys():
        del progress[job_id]
    return done
