"""Every wait the triggerer computes is a finite number of seconds within a stated range.

The triggerer's event loop is shared by every deferred task. A wait of NaN seconds is no wait
at all (``NaN > 0`` is false, so a loop that waits "until due" spins without ever yielding) and
an infinite one never ends. Numbers reach a trigger from what Airflow stored (a trigger
serialized by an older version, a kwarg edited by hand) and from files a job can write, so the
trigger and the poller clamp them here, whatever the operator checked when it took them.
"""

from __future__ import annotations

import math
from typing import Any

# Seconds between two polls of one job: from a hundredth of a second (tests) to an hour.
POLL_INTERVAL_RANGE = (0.01, 3600.0)
DEFAULT_POLL_INTERVAL = 5.0
# The shortest gap between two rounds of a poller, whatever a backend's first_poll_seconds says:
# the poller then always waits on the event loop between rounds.
ROUND_GAP_RANGE = (0.01, 3600.0)
DEFAULT_ROUND_GAP = 0.25
# How long a finished job's event may wait for the executor (``[stepop] resume_hold_seconds``).
RESUME_HOLD_RANGE = (0.0, 600.0)
# What is left of a task's execution_timeout when it deferred: up to a year.
TIME_LEFT_RANGE = (0.0, 366 * 86400.0)
# How long ``[triggerer] on_kill_timeout`` may be taken to be.
ON_KILL_TIMEOUT_RANGE = (0.0, 3600.0)
# A back-off's exponent stops growing here (2**16 times poll_interval is past any cap): a
# count of failures that grew for days must not overflow a float.
MAX_BACKOFF_EXPONENT = 16


def bounded(
    name: str, value: Any, limits: tuple[float, float], default: float
) -> tuple[float, str | None]:
    """``value`` as a float within ``limits``, and a note that says what was changed (None when
    it was used as given). NaN, a non-number or a bool gives ``default``; ±inf and values out
    of range give the nearest limit."""
    low, high = limits
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default, f"{name}={value!r} is not a number of seconds: using {default:g}"
    number = float(value)
    if math.isnan(number):
        return default, f"{name}=nan is not a number of seconds: using {default:g}"
    if number < low or number > high:
        clamped = min(max(number, low), high)
        return clamped, (
            f"{name}={value!r} is outside {low:g}..{high:g} seconds: using {clamped:g}"
        )
    return number, None


def finite_or_none(value: Any) -> float | None:
    """``value`` as a finite float, or None (absent, NaN, ±inf, not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None
