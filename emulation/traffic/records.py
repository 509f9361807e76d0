"""What the transfer engine (transfers.py) runs and what it measured:
plain data, so the figures made from it need none of the engine's I/O."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Stream:
    """One flow as the engine runs it, in emulated units."""

    name: str  # its 5-tuple, for errors
    src_pid: int
    dst_pid: int
    src_ip: str
    dst_ip: str
    protocol: str
    src_port: int
    dst_port: int
    rate_bps: float  # inf: as fast as TCP goes
    bytes: int  # per burst; 0: sends until each window closes
    windows: tuple[tuple[float, float], ...] = ()  # (start, stop) s; () for a job's flows (released per iteration)


@dataclass(frozen=True)
class Schedule:
    """A job's iterations: `streams` are its flows (indices)."""

    job: str
    streams: tuple[int, ...]
    iterations: int
    compute_gap_s: float
    start_s: float


@dataclass
class Burst:
    """Times in seconds since the run started."""

    released: float
    sent: float | None = None  # the sender began writing (None: the run ended first)
    done: float | None = None  # its last byte read at the receiver (None: not all arrived)
    received: int = 0


@dataclass(frozen=True)
class Iteration:
    job: str
    index: int
    start_s: float
    end_s: float | None  # the last flow's last byte; None: not finished by the run's end
    dispatch_s: float  # release -> the last sender writing: the method's overhead

    @property
    def time_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.start_s


@dataclass
class StreamResult:
    stream: Stream
    bursts: list[Burst] = field(default_factory=list)
    interval_bytes: list[int] = field(default_factory=list)  # per second of the run, as received
    error: str = ""
