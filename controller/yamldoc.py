"""YAML documents from users' files (fabric specs, scenarios): bounded in
size before anything is parsed, decoded as UTF-8, parsed safely. Every
failure is the caller's FieldError, on one line; none is a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml

from controller.errors import FieldError

# The 16K-GPU spec is under 2 KB and a scenario a few KB: a megabyte is
# generous, and a 100 MB file is refused at once instead of parsed for 30 s.
MAX_BYTES = 1 << 20


def read_yaml(path: str | Path, error: type[FieldError], max_bytes: int = MAX_BYTES) -> Any:
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise error("<file>", f"{path} is {size} bytes", f"at most {max_bytes} bytes")
        data = path.read_bytes()
    except OSError as exc:
        raise error("<file>", f"cannot read {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error("<file>", f"{path} is not UTF-8 text (byte {exc.start})", "a UTF-8 YAML file") from None
    return parse_yaml(text, error, max_bytes)


def parse_yaml(text: str, error: type[FieldError], max_bytes: int = MAX_BYTES) -> Any:
    if len(text) > max_bytes:
        raise error("<document>", f"{len(text)} characters", f"at most {max_bytes}")
    if (depth := _flow_depth(text)) > MAX_FLOW_DEPTH:
        raise error("<document>", f"[ ] and {{ }} nested {depth} deep", f"at most {MAX_FLOW_DEPTH} levels")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error("<document>", f"not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise error("<document>", "nested too deeply to read", "a spec or scenario a few levels deep") from None
    _check_expanded(doc, error)
    return doc


# PyYAML's scanner keeps a possible key per open bracket and walks them all
# at every token: 50,000 nested '[' cost seconds before the parser gives up.
# Counted first, so such a file is refused in milliseconds. Brackets inside
# quoted strings count too: a bound, not a parse, and no spec comes near it.
MAX_FLOW_DEPTH = 100
_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


def _flow_depth(text: str) -> int:
    steps = _OPEN[np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)]
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


MAX_VALUES = 200_000


def _check_expanded(doc: Any, error: type[FieldError]) -> None:
    """YAML aliases share one object among many places: a document can refer
    to itself, or ("billion laughs") expand to more values than any reader of
    it could walk. Counted as a reader would see it, with a budget."""
    seen = 0
    stack: list[tuple[Any, frozenset[int]]] = [(doc, frozenset())]
    while stack:
        value, above = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise error("<document>", f"expands to more than {MAX_VALUES} values (YAML aliases)", "a plain document")
        if isinstance(value, (dict, list)):
            if id(value) in above:
                raise error("<document>", "refers to itself (a YAML alias inside its own anchor)", "a plain document")
            inner = above | {id(value)}
            children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack.extend((child, inner) for child in children)
