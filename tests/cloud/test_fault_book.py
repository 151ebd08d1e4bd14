"""The fault book's job rules as a running attempt polls them (cloud.fake_http.faults)."""

from __future__ import annotations

import pytest

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


# --- capacity rules: matched on the job's machine and region, not its name -------------------


def test_a_capacity_rule_needs_a_machine_and_a_stage_the_fake_has() -> None:
    book = FaultBook(capacity_stages=("provision", "create"))
    for bad, why in (
        ({"kind": "capacity"}, "machine"),
        ({"kind": "capacity", "machine": " "}, "machine"),
        ({"kind": "capacity", "machine": "ml.p4d.24xlarge", "at": "queue"}, "capacity at"),
        ({"kind": "capacity", "machine": "ml.p4d.24xlarge", "count": 0}, "count"),
        ({"kind": "capacity", "machine": "ml.p4d.24xlarge", "seconds": -1}, "seconds"),
    ):
        with pytest.raises(ValueError, match=why):
            book.add([bad])
    book.add([{"kind": "capacity", "machine": "ml.p4d.24xlarge"}])
    # the fake's first stage is the default; every matching job unless a count says otherwise
    assert book.public() == [{"kind": "capacity", "machine": "ml.p4d.24xlarge", "at": "provision",
                              "rate": 1.0, "operation": "*"}]  # fmt: skip


def test_a_fake_without_capacity_refuses_the_kind() -> None:
    with pytest.raises(ValueError, match="no capacity"):
        FaultBook().add([{"kind": "capacity", "machine": "E2_HIGHCPU_8"}])


def test_a_capacity_rule_matches_the_machine_region_and_stage() -> None:
    book = FaultBook(capacity_stages=("provision", "create"))
    book.add([{"kind": "capacity", "machine": "Standard_NC6s_v3", "region": "eastus"}])
    assert book.take_capacity("provision", ["standard_nc6s_v3"], "EastUS") is not None
    assert book.take_capacity("provision", ["Standard_NC6s_v3"], "eastus") is not None  # again
    assert book.take_capacity("provision", ["Standard_DS3_v2"], "eastus") is None
    assert book.take_capacity("provision", ["Standard_NC6s_v3"], "westeurope") is None
    assert book.take_capacity("create", ["Standard_NC6s_v3"], "eastus") is None
    assert len(book.public()) == 1  # no count: it stands for every matching job


def test_a_counted_capacity_rule_takes_the_next_jobs_only() -> None:
    book = FaultBook(capacity_stages=("provision",))
    book.add([{"kind": "capacity", "machine": "a2-highgpu-1g", "count": 2, "match": "train"}])
    assert book.take_capacity("provision", ["a2-highgpu-1g"], "us-central1", "eval-1") is None
    taken = [book.take_capacity("provision", ["a2-highgpu-1g"], None, f"train-{i}") for i in "123"]
    assert [rule is not None for rule in taken] == [True, True, False]
    assert book.public() == []
