"""When to stop reading a newest-first list of jobs for the poller's watched jobs.

Vertex AI's ListCustomJobs and Azure ML's Jobs_List answer every watched job in about
ceil(N / 100) pages, but a job far behind other jobs' pages is cheaper to describe: the
poller describes every job a round's pages leave out. So a page is read only while it can
still spare describes (:class:`WatchedPages`). Standard library only: the triggerer imports
this with the backends, and no cloud SDK may come with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class WatchedPages:
    """The stop rule of one round's list pages, fed the jobs of each page as it is read.

    Stop once every watched job is answered, or after as many pages in a row that answer none
    of them as jobs still missing, or after as many pages as watched jobs, or at a page whose
    jobs are all older than the oldest watched job (``oldest``, epoch seconds; None when the
    request's own filter leaves such pages out, or a watched job's creation time is unknown).
    """

    def __init__(self, wanted: Iterable[str], oldest: float | None = None) -> None:
        self.wanted = frozenset(wanted)
        self.oldest = oldest
        self.answered: set[str] = set()
        self.pages = 0
        self.fruitless = 0  # pages in a row that answered no watched job
        self._hits = 0  # watched jobs the page being read answered

    def answers(self, job_id: str) -> bool:
        """Whether a listed job is a watched one not answered yet (it is answered from now)."""
        if job_id not in self.wanted or job_id in self.answered:
            return False
        self.answered.add(job_id)
        self._hits += 1
        return True

    def last(self, created: Sequence[float | None] = ()) -> bool:
        """After a page: whether it is the last worth reading. ``created``: its jobs' creation
        times in the page's order (None where unreadable)."""
        self.pages += 1
        self.fruitless = 0 if self._hits else self.fruitless + 1
        self._hits = 0
        missing = len(self.wanted) - len(self.answered)
        if not missing or self.fruitless >= missing or self.pages >= len(self.wanted):
            return True
        return _all_older(created, self.oldest)


def _all_older(created: Sequence[float | None], oldest: float | None) -> bool:
    """A newest-first page (as it reads) whose jobs are all older than ``oldest``."""
    stamps = [stamp for stamp in created if stamp is not None]
    if oldest is None or not stamps or len(stamps) < len(created):
        return False
    return stamps[0] >= stamps[-1] and stamps[0] < oldest
