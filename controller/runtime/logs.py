"""The daemon's log lines on stderr: timestamped text, or one JSON object
per line for a log shipper (`--log-format json`)."""

from __future__ import annotations

import json
import logging
import sys
import time

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _UtcText(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """RFC 3339 in UTC, to the millisecond: one clock for every replica's log."""
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


class JsonLines(_UtcText):
    """One object per record: time (RFC 3339, UTC), level, logger, message,
    and the traceback as `exception` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(log_format: str = "text", level: int = logging.INFO) -> None:
    """Replaces whatever logging was set up before (the CLI's plain format)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if log_format == "json" else _UtcText(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
