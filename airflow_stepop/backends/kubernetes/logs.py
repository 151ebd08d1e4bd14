"""A step's pod logs, read within the log budget and a bound, resumable by another triggerer.

The API server serves a container's log from a second of the kubelet's clock (``sinceTime``,
RFC 3339 to the second), each line stamped with that clock to the nanosecond
(``timestamps=true``). So the cursor keeps, per pod, the stamp of the last line relayed and how
many lines carried exactly that stamp; a read asks from that stamp's second and drops what the
cursor has seen. No other clock is involved, and a restarted triggerer resumes from the saved
cursor and repeats nothing.

A read takes at most ``READ_BYTES`` of one pod (``limitBytes``); a cut read keeps its last,
partial line for the next read and says more waits (a single line longer than a read is cut
there). A second of log longer than a read is read once more with ``WIDE_READ_BYTES``; past
that, the rest of that second is skipped, and a line says so. A finished Job's last read goes on to
each pod's end over as many reads as that takes, ``FINAL_READS`` per pod at most. Lines of a
Job of several pods carry their pod's index.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from airflow_stepop.backends.kubernetes.job import CONTAINER, container_state
from airflow_stepop.backends.log_lines import MORE, relayed_lines

READ_BYTES = 1 << 20
WIDE_READ_BYTES = 8 << 20
FINAL_READS = 50  # per pod: 50 MiB of a finished step's log into the task log


def split_stamp(line: str) -> tuple[str, str]:
    """``2026-11-29T10:00:00.123456789Z text`` -> (stamp, text); no stamp: ("", line)."""
    stamp, space, text = line.partition(" ")
    if space and len(stamp) >= 20 and stamp[4] == "-" and stamp.endswith("Z"):
        return stamp, text
    return "", line


def stamp_time(stamp: str) -> datetime:
    """An RFC 3339 stamp with up to nanoseconds, to the microsecond Python keeps."""
    head, _, fraction = stamp.removesuffix("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(fraction + '000000')[:6]}+00:00")


def new_lines(text: str, seen: dict[str, Any]) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """The (stamp, text) lines of ``text`` the pod's cursor ``seen`` has not relayed, and the
    cursor after them. Stamps are the kubelet's, in order; lines of one stamp are counted."""
    last, count = seen.get("time", ""), int(seen.get("count", 0))
    at_last = 0
    out = []
    for line in text.splitlines():
        stamp, body = split_stamp(line)
        if not stamp:
            continue
        if stamp < last:
            continue
        if stamp == last:
            at_last += 1
            if at_last <= count:
                continue
        if stamp != last:
            last, count, at_last = stamp, 0, 1
        count += 1
        out.append((stamp, body))
    return out, {**seen, "time": last, "count": count}


async def read_new_lines(
    read_log: Callable[..., Awaitable[str]],
    job: str,
    pods: list[dict[str, Any]],
    cursor: dict[str, Any] | None,
    *,
    final: bool,
    allowed: Callable[[], bool],
) -> tuple[list[str], dict[str, Any]]:
    """New lines of the Job's pods since ``cursor`` and the cursor to use next.

    ``read_log(pod_name, query)`` reads the pod's log with the API's query parameters;
    ``pods`` are the Job's pods as last listed; ``allowed()`` takes a log token before each
    read (none: stop here). The cursor is kept where the job may write: only pods named after
    this Job are read.
    """
    saved = (cursor or {}).get("pods") if isinstance(cursor, dict) else None
    state: dict[str, dict[str, Any]] = {
        name: value
        for name, value in ((n, _pod_cursor(v)) for n, v in (saved or {}).items())
        if isinstance(name, str) and name.startswith(f"{job}-") and value is not None
    } if isinstance(saved, dict) else {}  # fmt: skip
    several = len(pods) > 1
    lines: list[str] = []
    more = False
    for pod in sorted(pods, key=_index):
        name = (pod.get("metadata") or {}).get("name", "")
        if not name.startswith(f"{job}-") or not _started(pod):
            continue
        seen = state.setdefault(name, {})
        if seen.get("ended") or (not final and not allowed()):
            continue
        if final and seen.get("reads", 0) >= FINAL_READS:
            lines.append(f"[stepop] The log of pod {name} is longer than the task log takes; "
                         "read the rest with kubectl logs while the Job is kept.")  # fmt: skip
            seen["ended"] = True
            continue
        fresh, state[name], cut = await _read(read_log, name, seen)
        prefix = f"[{_index(pod)}] " if several else ""
        for _, body in fresh:
            lines.extend(relayed_lines(prefix + body))
        if final:
            state[name]["reads"] = seen.get("reads", 0) + 1
            state[name]["ended"] = not cut
        more = more or cut
    out: dict[str, Any] = {"pods": state}
    if more:
        out[MORE] = True
    return lines, out


def _pod_cursor(value: Any) -> dict[str, Any] | None:
    """A pod's saved cursor as this module writes it, or None: the cursor is kept where the job
    may write, and a value of another type would stop the relay, or lift its bounds."""
    if not isinstance(value, dict):
        return None
    stamp, count, reads = value.get("time", ""), value.get("count", 0), value.get("reads", 0)
    if not isinstance(stamp, str) or (stamp and not split_stamp(stamp + " x")[0]):
        return None
    numbers = (count, reads)
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in numbers):
        return None
    return {"time": stamp, "count": count, "reads": min(reads, FINAL_READS),
            "ended": value.get("ended") is True}  # fmt: skip


async def _read(
    read_log: Callable[[str, dict[str, Any]], Awaitable[str]], name: str, seen: dict[str, Any]
) -> tuple[list[tuple[str, str]], dict[str, Any], bool]:
    """One read of a pod's log from its cursor: the new lines, the cursor after them, and
    whether the read was cut (more waits)."""
    last = seen.get("time", "")
    for limit in (READ_BYTES, WIDE_READ_BYTES):
        query: dict[str, Any] = {"container": CONTAINER, "timestamps": "true",
                                 "limitBytes": limit}  # fmt: skip
        if last:
            query["sinceTime"] = last[:19] + "Z"  # its second: the API takes no finer time
        text = await read_log(name, query)
        cut = len(text.encode()) >= limit
        if cut and "\n" in text:  # the last line may be partial: read it again next time
            text = text[: text.rindex("\n") + 1]
        fresh, after = new_lines(text, seen)
        if fresh or not cut:
            return fresh, after, cut
    if not last:  # nothing stamped in a whole wide read: not a kubelet's log
        return [], seen, False
    # more than WIDE_READ_BYTES in one second, all seen: go on from the next second
    second = stamp_time(last).replace(microsecond=0) + timedelta(seconds=1)
    skipped = f"{name}: more of its log than the task log takes was written at {last[:19]}Z"
    return (
        [("", f"[stepop] {skipped}; the rest of that second is skipped")],
        {
            **seen,
            "time": second.strftime("%Y-%m-%dT%H:%M:%S.000000000Z"),
            "count": 0,
        },
        True,
    )


def _index(pod: dict[str, Any]) -> int:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    value = annotations.get("batch.kubernetes.io/job-completion-index", "0")
    return int(value) if str(value).isdigit() else 0


def _started(pod: dict[str, Any]) -> bool:
    """Whether the pod's step container has started (a waiting one has no log yet)."""
    state = container_state(pod)
    return "running" in state or "terminated" in state
