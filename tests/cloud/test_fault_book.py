"""The fault book's job rules as a running attempt polls them (cloud.fake_http.faults)."""

from __future__ import annotations

from cloud.fake_http import FaultBook


def test_an_attempt_takes_a_rule_added_after_it_started() -> None:
    book = FaultBook()
    seen: set[int] = set()
    assert book.take_job_fault("preempt", "job-a", seen) is None  # nothing yet
    book.add([{"kind": "preempt", "match": "job-a", "after_seconds": 2}])
    rule = book.take_job_fault("preempt", "job-a", seen)
    assert rule is not None and rule["after_seconds"] == 2
    assert book.public() == []  # count 1: taken once, then retired


def test_a_polling_attempt_rolls_a_rules_rate_once() -> None:
    book = FaultBook()
    book.add([{"kind": "preempt", "rate": 0.5, "count": None}])
    first: set[int] = set()
    second: set[int] = set()
    # every second attempt: the first attempt's draw misses, and its later polls do not draw again
    assert [book.take_job_fault("preempt", "job", first) for _ in range(3)] == [None] * 3
    assert book.take_job_fault("preempt", "job", second) is not None
    # without a set, each call draws (a start-of-job rule such as job_failure)
    assert book.take_job_fault("preempt", "job") is None
    assert book.take_job_fault("preempt", "job") is not None


def test_a_rule_for_another_job_is_left_for_it() -> None:
    book = FaultBook()
    book.add([{"kind": "preempt", "match": "job-b"}])
    assert book.take_job_fault("preempt", "job-a", set()) is None
    assert book.take_job_fault("preempt", "job-b", set()) is not None
