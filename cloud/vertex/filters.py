"""AIP-160 filters of the Vertex AI fake: ``ListCustomJobs`` and Cloud Logging ``entries:list``.

A poller filters jobs by display name, state, labels and times, and log entries by job id,
task name, severity and ``timestamp>``; :func:`parse_filter` reads such flat filters and
:func:`matches` / :func:`log_matches` evaluate them.
"""

from __future__ import annotations

import json
import re
from typing import Any

from cloud.fake_http import rfc3339
from cloud.vertex.api import ENUMS, ApiError
from cloud.vertex.state import Job, LogEntry

_CLAUSE = re.compile(
    r"\s*(?P<neg>NOT\s+|-)?(?P<field>[A-Za-z_][\w.]*)\s*(?P<op>!=|>=|<=|=|>|<|:)\s*"
    r'(?P<value>"(?:[^"\\]|\\.)*"|\S+)'
)
_FIELD_ALIASES = {
    "displayName": "display_name",
    "createTime": "create_time",
    "updateTime": "update_time",
}
_TIME_FIELDS = ("create_time", "update_time", "timestamp")

Clause = tuple[str, str, str, bool]  # field, operator, value, negated
Filter = list[list[Clause]]  # OR of ANDs


def parse_filter(text: str) -> Filter:
    """AIP-160 filters as list and log polling use them: ``a="x" AND (b>y OR NOT c:z)``.

    Parentheses are dropped and OR binds looser than AND, which is exact for the flat filters
    a poller writes; nested mixes of AND/OR inside parentheses are not supported.
    """
    text = text.strip()
    if not text:
        return [[]]
    groups: Filter = []
    flat = re.sub(r"[()]", " ", text)
    for group in re.split(r"\s+OR\s+", flat):
        clauses: list[Clause] = []
        for part in re.split(r"\s+AND\s+", group.strip()):
            m = _CLAUSE.fullmatch(part.strip())
            if m is None:
                raise ApiError(400, f'Invalid filter: "{text}"')
            value = m["value"]
            if value.startswith('"'):
                value = json.loads(value)
            field_name = _FIELD_ALIASES.get(m["field"], m["field"])
            clauses.append((field_name, m["op"], value, bool(m["neg"])))
        groups.append(clauses)
    return groups


def _timestamp(value: str) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise ApiError(400, f'Invalid timestamp "{value}" in filter.') from exc


def _compare(actual: Any, op: str, expected: str, is_time: bool = False) -> bool:
    if actual is None:
        return op == "!="
    left: Any = str(actual)
    right: Any = expected
    if is_time:
        left, right = _timestamp(left), _timestamp(right)
    if op in ("=", ":"):
        return left == right
    if op == "!=":
        return left != right
    return {">": left > right, "<": left < right, ">=": left >= right, "<=": left <= right}[op]


def _evaluate(flt: Filter, actual_of: Any) -> bool:
    """Any OR group whose every clause holds; ``actual_of(field)`` gives the value to compare."""
    for group in flt:
        ok = True
        for fld, op, value, negated in group:
            actual, value = actual_of(fld, value)
            if fld.startswith("labels.") and op == ":" and value == "*":
                held = actual is not None
            else:
                held = _compare(actual, op, value, fld in _TIME_FIELDS)
            if held == negated:
                ok = False
                break
        if ok:
            return True
    return False


def matches(resource: dict[str, Any], flt: Filter) -> bool:
    def actual_of(fld: str, value: str) -> tuple[Any, str]:
        if fld == "display_name":
            return resource.get("displayName"), value
        if fld == "state":
            if value.isdigit():
                value = next((k for k, v in ENUMS["JobState"].items() if v == int(value)), value)
            return resource.get("state"), value
        if fld.startswith("labels."):
            return (resource.get("labels") or {}).get(fld[len("labels.") :]), value
        if fld in ("create_time", "update_time"):
            return resource.get("createTime" if fld == "create_time" else "updateTime"), value
        raise ApiError(400, f'Unsupported filter field "{fld}".')

    return _evaluate(flt, actual_of)


def log_matches(job: Job, entry: LogEntry, flt: Filter) -> bool:
    def actual_of(fld: str, value: str) -> tuple[Any, str]:
        if fld == "resource.type":
            return "ml_job", value
        if fld == "resource.labels.job_id":
            return job.job_id, value
        if fld == "resource.labels.task_name":
            return entry.task, value
        if fld == "timestamp":
            return rfc3339(entry.ts), value
        if fld == "severity":
            return ("ERROR" if entry.stream == "stderr" else "INFO"), value
        if fld == "logName":
            return f"projects/{job.project}/logs/{entry.task}", value
        raise ApiError(400, f'Unsupported filter field "{fld}".')

    return _evaluate(flt, actual_of)
