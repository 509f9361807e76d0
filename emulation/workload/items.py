"""A scenario's traffic items, YAML -> model: flows, pattern, job, jobs. Every
refusal names its field (`traffic[2].fan_in`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from controller.errors import NAME_RULE, valid_name
from controller.fabric import addressing as ad
from controller.te.jobs import MAX_QPS, Pattern
from emulation.workload.model import (
    PATTERN_KINDS,
    PROTOCOLS,
    ExplicitFlow,
    FlowsItem,
    Item,
    JobItem,
    JobMixItem,
    PatternItem,
    Rank,
    Window,
    WorkloadError,
)
from emulation.workload.values import byte_count, integer, kind_of, number, only

T = TypeVar("T")

MAX_DURATION_S = 3600.0
MAX_RATE_GBPS = 3200.0
MAX_ITERATIONS = 100_000
MAX_EXPLICIT_FLOWS = 10_000
MIN_PERIOD_S = 0.01  # an on/off or burst period: shorter is not a burst but a rate
MAX_BURSTS = 10_000  # per flow

_WINDOW = {"start_s", "stop_s", "on_s", "off_s", "every_s"}
_VOLUME = {"protocol", "rate_gbps", "bytes", "qps_per_connection"}
_FLOW = {"src", "dst"} | _VOLUME | _WINDOW
_PATTERN = {"pattern", "fan_in", "bystander", "servers", "rail"} | _VOLUME | _WINDOW
_COLLECTIVE = {"protocol", "flow_gbps", "message_bytes", "iterations", "compute_gap_s", "qps_per_connection"}
_JOB = {"job", "gpus", "collective", "start_s", "stop_s", "gpus_per_server", "servers"} | _COLLECTIVE
_MIX = {"jobs", "sizes", "collectives", "all_to_all_max_gpus", "background"} | _COLLECTIVE
ITEM_KINDS = ("flows", "pattern", "job", "jobs")


def parse_item(value: Any, where: str, duration: float) -> Item:
    if not isinstance(value, Mapping):
        raise WorkloadError(where, f"got {kind_of(value)}", "a mapping with one of: " + ", ".join(ITEM_KINDS))
    kinds = [k for k in ITEM_KINDS if k in value]
    if len(kinds) != 1:
        raise WorkloadError(
            where, f"has {' and '.join(kinds) or 'none'} of the kinds", "exactly one of: flows, pattern, job, jobs"
        )
    kind = kinds[0]
    if kind == "flows":
        only(value, f"{where}.", {"flows"})
        flows = value["flows"]
        if not isinstance(flows, list) or not 1 <= len(flows) <= MAX_EXPLICIT_FLOWS:
            raise WorkloadError(f"{where}.flows", f"got {kind_of(flows)}", f"a list of 1 to {MAX_EXPLICIT_FLOWS} flows")
        return FlowsItem(tuple(_flow(f, f"{where}.flows[{j}]", duration) for j, f in enumerate(flows)))
    if kind == "pattern":
        return _pattern(value, where, duration)
    if kind == "job":
        return _job(value, where, duration)
    return _mix(value, where)


def _protocol(value: Mapping[str, Any], where: str) -> str:
    protocol = value.get("protocol", "tcp")
    if protocol not in PROTOCOLS:
        raise WorkloadError(f"{where}.protocol", f"got {protocol!r}", ", ".join(PROTOCOLS))
    return str(protocol)


def _qps(value: Mapping[str, Any], where: str) -> int:
    return integer(value, "qps_per_connection", 1, lower=1, upper=MAX_QPS, prefix=f"{where}.")


def _volume(value: Mapping[str, Any], where: str) -> tuple[str, float | None, int]:
    protocol = _protocol(value, where)
    rate = None
    if "rate_gbps" in value:
        rate = number(value, "rate_gbps", lower=0.0, upper=MAX_RATE_GBPS, prefix=f"{where}.")
    size = byte_count(value, "bytes", f"{where}.") if "bytes" in value else 0
    return protocol, rate, size


def _start(value: Mapping[str, Any], prefix: str, duration: float) -> float:
    start = number(value, "start_s", lower=0.0, upper=duration, default=0.0, prefix=prefix, closed=True)
    if start >= duration:
        raise WorkloadError(
            prefix + "start_s", f"got {start:g}", f"less than duration_s ({duration:g}): inside the run"
        )
    return start


def _window(value: Mapping[str, Any], where: str, duration: float, finite: bool) -> Window:
    p = f"{where}."
    start = _start(value, p, duration)
    stop = None
    if "stop_s" in value:
        stop = number(value, "stop_s", lower=start, upper=duration, prefix=p)
    on = number(value, "on_s", lower=MIN_PERIOD_S, upper=duration, prefix=p, closed=True) if "on_s" in value else 0.0
    off = number(value, "off_s", lower=MIN_PERIOD_S, upper=duration, prefix=p, closed=True) if "off_s" in value else 0.0
    if on and finite:
        raise WorkloadError(
            p + "on_s", "does not apply to a flow with bytes", "every_s: a burst of its bytes per period"
        )
    if bool(on) != bool(off):
        missing = "off_s" if on else "on_s"
        raise WorkloadError(p + missing, "missing", "on_s and off_s together (an on/off source)")
    every = (
        number(value, "every_s", lower=MIN_PERIOD_S, upper=duration, prefix=p, closed=True)
        if "every_s" in value
        else 0.0
    )
    if every and not finite:
        raise WorkloadError(
            p + "every_s", "only applies to a flow with bytes", "on_s and off_s for a rate or elastic flow"
        )
    window = Window(start, stop, on, off, every)
    if window.period and (window.stop(duration) - start) / window.period > MAX_BURSTS:
        field = "every_s" if every else "on_s"
        raise WorkloadError(
            p + field, f"{window.period:g} s periods make more than {MAX_BURSTS} bursts", "a longer period"
        )
    return window


def _endpoint(value: Any, where: str) -> Any:
    """A NIC address, or a job's rank as "JOB/RANK" or {job: JOB, rank: RANK}."""
    forms = "a NIC address (10.RAIL.POD.SERVER+1), JOB/RANK, or {job: JOB, rank: RANK}"
    if isinstance(value, Mapping):
        only(value, f"{where}.", {"job", "rank"})
        job, rank = value.get("job"), value.get("rank")
    elif isinstance(value, str) and "/" in value:
        job, _, text = value.partition("/")
        rank = int(text) if text.isascii() and text.isdigit() else text
    elif isinstance(value, str):
        try:
            return ad.parse_nic_address(value)
        except ad.AddressError as exc:
            raise WorkloadError(where, str(exc), forms) from None
    else:
        raise WorkloadError(where, f"got {kind_of(value)}", forms)
    if not isinstance(job, str) or not valid_name(job):
        raise WorkloadError(f"{where}.job" if isinstance(value, Mapping) else where, f"job {job!r}", NAME_RULE)
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise WorkloadError(
            f"{where}.rank" if isinstance(value, Mapping) else where, f"rank {rank!r}", "an integer >= 0"
        )
    return Rank(job, rank)


def _flow(value: Any, where: str, duration: float) -> ExplicitFlow:
    if not isinstance(value, Mapping):
        raise WorkloadError(where, f"got {kind_of(value)}", "a mapping with src, dst, and protocol, rate_gbps or bytes")
    only(value, f"{where}.", _FLOW)
    for end in ("src", "dst"):
        if end not in value:
            raise WorkloadError(f"{where}.{end}", "missing", "a NIC address or JOB/RANK")
    src, dst = _endpoint(value["src"], f"{where}.src"), _endpoint(value["dst"], f"{where}.dst")
    if src == dst:
        raise WorkloadError(f"{where}.dst", "is the flow's own source", "another NIC")
    protocol, rate, size = _volume(value, where)
    window = _window(value, where, duration, bool(size))
    return ExplicitFlow(src, dst, protocol, rate, size, window, _qps(value, where))


def _pattern(value: Mapping[str, Any], where: str, duration: float) -> PatternItem:
    only(value, f"{where}.", _PATTERN)
    kind = value["pattern"]
    if kind not in PATTERN_KINDS:
        raise WorkloadError(f"{where}.pattern", f"got {kind!r}", ", ".join(PATTERN_KINDS))
    for key, wanted in (("fan_in", "incast"), ("bystander", "incast"), ("servers", "all-to-all")):
        if key in value and kind != wanted:
            raise WorkloadError(f"{where}.{key}", f"only applies to pattern {wanted}, not {kind}")
    protocol, rate, size = _volume(value, where)
    bystander = value.get("bystander", False)
    if not isinstance(bystander, bool):
        raise WorkloadError(f"{where}.bystander", f"got {bystander!r}", "true or false")
    return PatternItem(
        kind,
        protocol,
        rate,
        size,
        _window(value, where, duration, bool(size)),
        integer(value, "fan_in", 8, lower=2, prefix=f"{where}."),
        bystander,
        integer(value, "servers", 8, lower=2, upper=64, prefix=f"{where}."),
        integer(value, "rail", None, lower=0, upper=1024, prefix=f"{where}.") if "rail" in value else None,
        _qps(value, where),
    )


def _collective_settings(value: Mapping[str, Any], where: str) -> dict[str, Any]:
    p = f"{where}."
    protocol = _protocol(value, where)
    iterations = integer(value, "iterations", 0, lower=0, upper=MAX_ITERATIONS, prefix=p)
    message = byte_count(value, "message_bytes", p) if "message_bytes" in value else 0
    if iterations and not message:
        raise WorkloadError(
            p + "message_bytes", "missing", "the collective's message size, e.g. 64GB (with iterations)"
        )
    if message and not iterations:
        raise WorkloadError(p + "iterations", "missing", "an integer >= 1 (with message_bytes)")
    if "compute_gap_s" in value and not iterations:
        raise WorkloadError(p + "compute_gap_s", "only applies with iterations")
    return {
        "protocol": protocol,
        "flow_gbps": number(value, "flow_gbps", lower=0.0, upper=MAX_RATE_GBPS, default=100.0, prefix=p, closed=True),
        "message_bytes": message,
        "iterations": iterations,
        "compute_gap_s": number(
            value, "compute_gap_s", lower=0.0, upper=MAX_DURATION_S, default=0.0, prefix=p, closed=True
        ),
        "qps_per_connection": _qps(value, where),
    }


def _collective(value: Any, where: str) -> Pattern:
    try:
        return Pattern(value)
    except ValueError:
        raise WorkloadError(where, f"got {value!r}", ", ".join(p.value for p in Pattern)) from None


def _job(value: Mapping[str, Any], where: str, duration: float) -> JobItem:
    only(value, f"{where}.", _JOB)
    name = value["job"]
    if not isinstance(name, str) or not valid_name(name):
        raise WorkloadError(f"{where}.job", f"got {name!r}", "the job's name: " + NAME_RULE)
    settings = _collective_settings(value, where)
    p = f"{where}."
    start = _start(value, p, duration)
    stop = None
    if "stop_s" in value:
        if settings["iterations"]:
            raise WorkloadError(p + "stop_s", "does not apply with iterations (the job ends after its last one)")
        stop = number(value, "stop_s", lower=start, upper=duration, prefix=p)
    servers = value.get("servers", [])
    if not isinstance(servers, list) or not all(isinstance(s, str) and valid_name(s) for s in servers):
        raise WorkloadError(p + "servers", f"got {servers!r}", "a list of server names")
    if len(set(servers)) != len(servers):
        raise WorkloadError(p + "servers", "names a server twice", "each server once")
    return JobItem(
        name,
        integer(value, "gpus", None, lower=1, upper=1 << 20, prefix=p),
        _collective(value.get("collective", "ring"), p + "collective"),
        start_s=start,
        stop_s=stop,
        gpus_per_server=integer(value, "gpus_per_server", 0, lower=0, upper=1024, prefix=p),
        servers=tuple(servers),
        **settings,
    )


def _mix(value: Mapping[str, Any], where: str) -> JobMixItem:
    only(value, f"{where}.", _MIX)
    p = f"{where}."
    defaults = JobMixItem()
    fill = number(value, "jobs", lower=0.0, upper=1.0, prefix=p)
    background = number(value, "background", lower=0.0, upper=1.0, default=0.0, prefix=p, closed=True)
    if fill + background > 1.0:
        raise WorkloadError(
            p + "background",
            f"{background:g} with jobs {fill:g} asks for more than the fabric",
            "jobs + background <= 1",
        )
    a2a = integer(value, "all_to_all_max_gpus", defaults.all_to_all_max_gpus, lower=1, prefix=p)
    return JobMixItem(
        fill,
        _weights(value, "sizes", defaults.sizes, _size, p),
        _weights(value, "collectives", defaults.collectives, _collective, p),
        a2a,
        **_collective_settings(value, where),
        background=background,
    )


def _size(value: Any, where: str) -> int:
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(where, f"got {value!r}", "a GPU count >= 1")
    return value


def _weights(
    value: Mapping[str, Any],
    key: str,
    default: tuple[tuple[T, float], ...],
    item: Callable[[Any, str], T],
    prefix: str,
) -> tuple[tuple[T, float], ...]:
    where = prefix + key
    weights = value.get(key)
    if weights is None:
        return default
    if isinstance(weights, list):
        weights = dict.fromkeys(weights, 1.0)
    if not isinstance(weights, Mapping) or not weights:
        raise WorkloadError(where, f"got {weights!r}", "a non-empty mapping of value -> weight, or a list")
    out = []
    for k, weight in weights.items():
        parsed = item(k, f"{where}.{k}")
        out.append((parsed, number({k: weight}, k, lower=0.0, upper=1e9, prefix=f"{where}.")))
    return tuple(out)


def check_names(items: tuple[Item, ...]) -> None:
    """Job names are unique, and a flow's JOB/RANK names a job item and one of its ranks."""
    gpus: dict[str, int] = {}
    for i, item in enumerate(items):
        if isinstance(item, JobItem):
            if item.name in gpus:
                raise WorkloadError(f"traffic[{i}].job", f"{item.name!r} is named twice", "one name per job")
            gpus[item.name] = item.gpus
    for i, item in enumerate(items):
        if not isinstance(item, FlowsItem):
            continue
        for j, flow in enumerate(item.flows):
            for end in ("src", "dst"):
                ref = getattr(flow, end)
                if not isinstance(ref, Rank):
                    continue
                where = f"traffic[{i}].flows[{j}].{end}"
                if ref.job not in gpus:
                    raise WorkloadError(
                        where, f"no job {ref.job!r} in this scenario", ", ".join(sorted(gpus)) or "none"
                    )
                if ref.rank >= gpus[ref.job]:
                    raise WorkloadError(where, f"{ref.job} has no rank {ref.rank}", f"0 to {gpus[ref.job] - 1}")
