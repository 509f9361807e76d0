"""Typed records written as JSON: the one flattening every report shares.

A record's fields are named as their JSON keys. Two markers in a field's
metadata shape the JSON without a hand-written `as_json` per record:
`FLATTENED` puts a nested record's keys in its parent's object (a report
that grew a sub-record keeps the JSON it always had), and `OMITTED_IF_NONE`
leaves a key out rather than writing null. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

Json = dict[str, Any]
OMITTED_IF_NONE = {"omitted_if_none": True}
FLATTENED = {"flattened": True}
FLATTENED_IF_ANY = {"flattened": True, "omitted_if_none": True}


def as_json(record: Any) -> Json:
    """A record (a frozen dataclass) as a JSON-ready dict."""
    out: Json = {}
    for f in dataclasses.fields(record):
        value = plain(getattr(record, f.name))
        if value is None and f.metadata.get("omitted_if_none"):
            continue
        if f.metadata.get("flattened"):
            out.update(value)
        else:
            out[f.name] = value
    return out


def plain(value: Any) -> Any:
    """Records, tuples and mappings, all the way down, as JSON's lists and objects."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return as_json(value)
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return value
