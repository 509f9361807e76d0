"""Replies bounded by construction, on the 16,384-GPU spec over a real gRPC
channel against the real daemon (no fabric needed): a 1024-GPU all-to-all
(130,048 flows) is placed, read, listed, watched and released with every
call answering OK; its flows come page by page; a reply that cannot fit is
refused before anything is committed."""

import threading

import grpc
import pytest

from controller.api.errors import FIELD_METADATA_KEY
from controller.fabric.spec import SPECS_DIR
from emulation.processes.controller_process import ControllerProcess, Ports

SPEC = SPECS_DIR / "ft2-16k.yaml"
FLOWS = 128 * 127 * 8  # 128 servers of 8 GPUs, every server to every other, on each rail


def daemon(tmp_path, *extra: str) -> ControllerProcess:
    ctl = ControllerProcess(SPEC, tmp_path / "intent.db", Ports.pick(), tmp_path / "controller.log", extra_args=extra)
    ctl.start().wait_serving_api(timeout_s=120)
    return ctl


def refused_on_view(call) -> str:
    with pytest.raises(grpc.RpcError) as err:
        call()
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert dict(err.value.trailing_metadata())[FIELD_METADATA_KEY] == "view"  # type: ignore[arg-type,index]
    return err.value.details() or ""


def test_the_largest_job_answers_every_call_and_its_flows_come_in_pages(tmp_path):
    ctl = daemon(tmp_path)
    try:
        with ctl.client() as client:
            client.timeout = 60
            # Its full reply (~6 MB) cannot fit 4 MiB: refused, and nothing placed.
            details = refused_on_view(lambda: client.place_job("moe", 1024, "all-to-all", view="full"))
            assert "ListJobFlows" in details
            assert client.list_jobs() == []
            _, listed_at = client.list_jobs_at()
            events: list = []
            stream = client.watch_jobs(timeout_s=60, since_revision=listed_at)
            reader = threading.Thread(target=lambda: events.extend(e for _, e in zip(range(2), stream)), daemon=True)
            reader.start()
            placed = client.place_job("moe", 1024, "all-to-all")  # a summary: OK
            assert placed.created and len(placed.job.gpus) == 1024 and placed.job.flow_count == FLOWS
            assert not placed.job.flows
            assert client.get_job("moe") == placed.job
            refused_on_view(lambda: client.get_job("moe", view="full"))
            assert [j.job_id for j in client.list_jobs()] == ["moe"]
            flows = client.job_flows("moe")
            assert len(flows) == FLOWS and len({(f.src_address, f.dst_address) for f in flows}) == FLOWS
            released = client.release_job("moe")
            assert released.job_id == "moe" and released.flow_count == FLOWS
            reader.join(timeout=30)
            stream.cancel()  # type: ignore[attr-defined]
            assert [(e.job.job_id, e.job.flow_count) for e in events] == [("moe", FLOWS), ("moe", FLOWS)]
            assert [e.intent_revision for e in events] == [listed_at + 1, listed_at + 2]
    finally:
        ctl.stop()


def test_a_reply_that_cannot_fit_a_lowered_limit_is_refused_uncommitted(tmp_path):
    ctl = daemon(tmp_path, "--max-message-bytes", str(64 * 1024))
    try:
        with ctl.client() as client:
            client.timeout = 60
            # Even the summary of 2048 GPUs (about 100 KB) exceeds 64 KiB.
            details = refused_on_view(lambda: client.place_job("big", 2048, "ring"))
            assert "--max-message-bytes" in details
            assert client.list_jobs() == []
            with pytest.raises(grpc.RpcError) as err:
                client.get_job("big")
            assert err.value.code() is grpc.StatusCode.NOT_FOUND
            small = client.place_job("small", 64, "ring")  # one that fits is placed
            assert small.created and not small.oversubscribed
            with pytest.raises(grpc.RpcError) as err:  # a limit on the prediction refuses, uncommitted
                client.place_job("tight", 64, "ring", max_predicted_utilization=1e-6)
            assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
            assert [j.job_id for j in client.list_jobs()] == ["small"]
    finally:
        ctl.stop()
