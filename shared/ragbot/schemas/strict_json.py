"""Strict JSON parsing shared by the JSON body guard and JSONL readers: UTF-8 only, nesting bounded,
finite numbers, integers within the 64-bit range the stores hold, no lone surrogates. Every refusal is
a ``JSONRefused`` whose message says what to fix."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ragbot.schemas.limits import MAX_INT64, MAX_JSON_DEPTH

__all__ = ["JSONRefused", "json_problem", "loads_strict"]


class JSONRefused(ValueError):
    """JSON that no ragbot API accepts; the message says what to fix."""


_SURROGATE = re.compile("[\ud800-\udfff]")
_INT64_DIGITS = len(str(MAX_INT64))


def _constant(name: str) -> Any:
    raise JSONRefused(f"{name} is not a JSON number: send a finite number or null")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONRefused(f"the number {text[:40]} is beyond the range of a 64-bit float: send a smaller one")
    return value


def _int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > _INT64_DIGITS or abs(int(text)) > MAX_INT64:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise JSONRefused(
            f"the integer {shown} is beyond the 64-bit range (at most {MAX_INT64}) that the stores hold"
        )
    return int(text)


def _too_deep(value: Any, *, max_depth: int) -> str | None:
    """Why ``value`` is refused after parsing: nesting past ``max_depth``, or a lone surrogate."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return "a string holds a lone UTF-16 surrogate (\\ud800-\\udfff escape): send real characters"
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > max_depth:
            return f"the body nests arrays or objects deeper than {max_depth} levels: flatten it"
        children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)
    return None


def loads_strict(body: bytes | str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The parsed JSON value, or ``JSONRefused`` saying what is wrong with it."""
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONRefused(
                f"the body is not valid UTF-8 (byte {exc.start}): send JSON encoded as UTF-8"
            ) from None
    try:
        value = json.loads(body, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except JSONRefused:
        raise
    except RecursionError:
        raise JSONRefused(
            f"the body nests arrays or objects deeper than {max_depth} levels: flatten it"
        ) from None
    except json.JSONDecodeError as exc:
        raise JSONRefused(
            f"the body is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except ValueError as exc:  # e.g. an integer over Python's digit limit
        raise JSONRefused(f"the body is not acceptable JSON: {exc}") from None
    problem = _too_deep(value, max_depth=max_depth)
    if problem:
        raise JSONRefused(problem)
    return value


def json_problem(body: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """What is wrong with a JSON body, in words a client can act on; None when it is fine."""
    try:
        loads_strict(body, max_depth=max_depth)
    except JSONRefused as exc:
        return str(exc)
    return None
