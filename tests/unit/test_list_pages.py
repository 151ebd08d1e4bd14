"""The stop rule of the poller's list pages (Vertex AI's and Azure ML's ``astatuses``)."""

from __future__ import annotations

from collections.abc import Sequence

from airflow_stepop.backends.list_pages import WatchedPages


def _read(
    watched: WatchedPages,
    pages: Sequence[Sequence[str]],
    created: Sequence[Sequence[float | None]] = (),
) -> tuple[list[str], int]:
    """The jobs answered, in order, and how many pages were read before the rule stopped."""
    answered: list[str] = []
    for i, page in enumerate(pages):
        answered += [job for job in page if watched.answers(job)]
        if watched.last(created[i] if created else ()):
            return answered, i + 1
    return answered, len(pages)


def test_the_pages_stop_once_every_watched_job_is_answered():
    watched = WatchedPages(["a", "b", "c"])
    pages = [["x", "a"], ["b", "y"], ["c", "z"], ["w"]]
    assert _read(watched, pages) == (["a", "b", "c"], 3)


def test_a_job_listed_twice_is_answered_once():
    watched = WatchedPages(["a", "b"])
    assert _read(watched, [["a", "a"], ["a", "b"]]) == (["a", "b"], 2)
    assert not watched.answers("a")


def test_as_many_fruitless_pages_in_a_row_as_jobs_missing_stop_them():
    watched = WatchedPages("abcdefgh")
    pages = [list("abcde"), ["x"], ["x"], ["x"], ["f"]]  # three missing, three fruitless pages
    assert _read(watched, pages) == (list("abcde"), 4)
    assert watched.fruitless == 3


def test_a_page_that_answers_a_job_restarts_the_fruitless_count():
    watched = WatchedPages("abcdefghij")
    pages = [list("abcdefg"), ["x"], ["x"], ["h"], ["x"], ["i"], ["x"], ["j"]]
    # three fruitless pages in all by the fifth, two jobs missing: but never two in a row
    assert _read(watched, pages) == (list("abcdefghi"), 7)


def test_never_more_pages_than_watched_jobs():
    watched = WatchedPages("abc")
    assert _read(watched, [["a"], ["x"], ["b"], ["c"]]) == (["a", "b"], 3)


def test_a_page_whose_jobs_are_all_older_than_the_oldest_watched_job_is_the_last():
    pages = [["a"], ["x", "y"], ["z"]]
    watched = WatchedPages("abcde", oldest=100.0)
    assert _read(watched, pages, [[120.0], [110.0, 99.0], [98.0]]) == (["a"], 3)
    watched = WatchedPages("abcde", oldest=100.0)
    assert _read(watched, pages, [[120.0], [99.0, 98.0], [97.0]]) == (["a"], 2)


def test_no_age_stop_without_an_oldest_time_nor_at_a_page_with_an_unreadable_time():
    pages = [["a"], ["x", "w"], ["y"]]
    for oldest, created in (
        (None, [[10.0], [9.0, 8.0], [7.0]]),
        (100.0, [[120.0], [None, 50.0], [150.0]]),
    ):
        assert _read(WatchedPages("abcde", oldest), pages, created) == (["a"], 3)


def test_a_page_not_newest_first_is_no_age_stop():
    watched = WatchedPages("abcde", oldest=100.0)
    created = [[120.0], [50.0, 60.0], [150.0]]
    assert _read(watched, [["a"], ["x", "y"], ["z"]], created) == (["a"], 3)
