"""Per-process rate limits for a service's calls: one token bucket per poll group.

Services throttle per account and region, and List calls most (SageMaker ListTrainingJobs has
been seen at 2 requests/s for a whole account). Every List call of a poll group in one process,
the poller's and a re-attach check's, takes a token of the same bucket first; log relay takes
tokens of its own bucket, so log calls do not grow with the number of jobs.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field


@dataclass
class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up; safe from threads and coroutines."""

    rate: float
    burst: float
    _tokens: float = field(init=False)
    _stamp: float = field(init=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._tokens = self.burst
        self._stamp = time.monotonic()

    def _take(self) -> float:
        """Take a token now if there is one (0.0), else the seconds until one is due."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            if self._tokens >= 1:
                self._tokens -= 1
                return 0.0
            return (1 - self._tokens) / self.rate

    def try_acquire(self) -> bool:
        return self._take() == 0.0

    def acquire(self) -> None:
        while (wait := self._take()) > 0:
            time.sleep(wait)

    async def aacquire(self) -> None:
        while (wait := self._take()) > 0:
            await asyncio.sleep(wait)


_buckets: dict[tuple[str, str], TokenBucket] = {}
_buckets_lock = threading.Lock()


def bucket(kind: str, group: str, rate: float, burst: float) -> TokenBucket:
    """The process's bucket of ``kind`` ("list", "logs") for one poll group."""
    with _buckets_lock:
        key = (kind, group)
        if key not in _buckets:
            _buckets[key] = TokenBucket(rate=rate, burst=burst)
        return _buckets[key]


def list_limiter(group: str) -> TokenBucket:
    """The bucket every List call of ``group`` takes from ([stepop] list_calls_per_second)."""
    from airflow_stepop import config

    rate = config.get_float("list_calls_per_second")
    return bucket("list", group, rate=rate, burst=max(1.0, rate))


def log_limiter(group: str) -> TokenBucket:
    """The bucket every log call of ``group`` takes from ([stepop] log_calls_per_second)."""
    from airflow_stepop import config

    rate = config.get_float("log_calls_per_second")
    return bucket("logs", group, rate=rate, burst=max(1.0, 2 * rate))
