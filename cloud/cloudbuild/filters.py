"""ListBuilds' ``filter``, as Cloud Build reads it: ``field op "value"`` terms with AND, OR
(which binds tighter, as in Google's filter syntax), NOT and parentheses.

Fields: ``status``, ``tags`` (true when any tag equals the value), ``build_id`` / ``id``,
``images`` (any), ``trigger_id``, ``project_id``, ``create_time``, ``start_time``,
``finish_time`` (compared as RFC 3339 text, which orders like the times). Operators: ``=``,
``!=``, ``<``, ``<=``, ``>``, ``>=``; ``:`` is ``=``. Anything else is refused with 400.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from cloud.cloudbuild.api import ApiError

Predicate = Callable[[dict[str, Any]], bool]
_TOKEN = re.compile(
    r'\s*(?:(?P<paren>[()])|(?P<op><=|>=|!=|=|<|>|:)|"(?P<quoted>(?:[^"\\]|\\.)*)"'
    r"|(?P<word>[A-Za-z0-9_.\-*/]+))"
)
FIELDS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "status": lambda b: [b.get("status", "")],
    "tags": lambda b: list(b.get("tags", [])),
    "build_id": lambda b: [b.get("id", "")],
    "id": lambda b: [b.get("id", "")],
    "images": lambda b: list(b.get("images", [])),
    "trigger_id": lambda b: [b.get("buildTriggerId", "")],
    "project_id": lambda b: [b.get("projectId", "")],
    "create_time": lambda b: [b.get("createTime", "")],
    "start_time": lambda b: [b.get("startTime", "")],
    "finish_time": lambda b: [b.get("finishTime", "")],
}
_COMPARE: dict[str, Callable[[str, str], bool]] = {
    "=": lambda a, b: a == b,
    ":": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _bad(text: str, why: str) -> ApiError:
    return ApiError(400, f'Invalid filter "{text}": {why}')


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text.rstrip()):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise _bad(text, f"unexpected text at {pos}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def parse_filter(text: str | None) -> Predicate:
    """A predicate over builds (their JSON mapping, enums as names)."""
    if not text or not text.strip():
        return lambda _b: True
    tokens = _tokens(text)
    pred, rest = _and(tokens, text)
    if rest:
        raise _bad(text, f"unexpected {rest[0][1]!r}")
    return pred


def _and(tokens: list[tuple[str, str]], text: str) -> tuple[Predicate, list[tuple[str, str]]]:
    parts = []
    while True:
        pred, tokens = _or(tokens, text)
        parts.append(pred)
        if tokens and tokens[0] == ("word", "AND"):
            tokens = tokens[1:]
            continue
        if tokens and tokens[0][0] in ("word", "paren") and tokens[0] != ("paren", ")"):
            continue  # juxtaposition is AND
        return (lambda b: all(p(b) for p in parts)), tokens


def _or(tokens: list[tuple[str, str]], text: str) -> tuple[Predicate, list[tuple[str, str]]]:
    parts = []
    while True:
        pred, tokens = _unary(tokens, text)
        parts.append(pred)
        if tokens and tokens[0] == ("word", "OR"):
            tokens = tokens[1:]
            continue
        return (lambda b: any(p(b) for p in parts)), tokens


def _unary(tokens: list[tuple[str, str]], text: str) -> tuple[Predicate, list[tuple[str, str]]]:
    if not tokens:
        raise _bad(text, "a term is missing")
    if tokens[0] == ("word", "NOT"):
        inner, rest = _unary(tokens[1:], text)
        return (lambda b: not inner(b)), rest
    if tokens[0] == ("paren", "("):
        inner, rest = _and(tokens[1:], text)
        if not rest or rest[0] != ("paren", ")"):
            raise _bad(text, "a ')' is missing")
        return inner, rest[1:]
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "op":
        raise _bad(text, f"expected <field> <op> <value> at {tokens[0][1]!r}")
    field, op, (kind, value) = tokens[0][1], tokens[1][1], tokens[2]
    if field not in FIELDS:
        raise _bad(text, f"unknown field {field!r}: use one of {', '.join(FIELDS)}")
    if kind not in ("quoted", "word"):
        raise _bad(text, f"expected a value after {field}{op}")
    value = value.replace('\\"', '"')
    values, compare = FIELDS[field], _COMPARE[op]
    if op == "!=":
        return (lambda b: all(compare(v, value) for v in values(b))), tokens[3:]
    return (lambda b: any(compare(v, value) for v in values(b))), tokens[3:]
