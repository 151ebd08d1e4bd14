"""A Job and its pods, as the API returns them, in the contract's words."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow_stepop.backends.kubernetes.job import billing, job_status

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def stamp(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(*conditions, suspend=False, deleting=False, limits=None):
    meta = {"name": "train-t1"}
    if deleting:
        meta["deletionTimestamp"] = stamp(1)
    container = {"name": "step", "resources": {"limits": limits or {}}}
    return {
        "metadata": meta,
        "spec": {"suspend": suspend, "parallelism": 1, "activeDeadlineSeconds": 900,
                 "template": {"spec": {"containers": [container]}}},
        "status": {"conditions": [
            {"type": kind, "status": status, "reason": reason, "message": f"{reason} said"}
            for kind, status, reason in conditions
        ]},
    }  # fmt: skip


def pod(phase="Running", *, waiting=None, terminated=None, reason=None, scheduled=None):
    status = {"phase": phase, "conditions": []}
    if reason:
        status.update(reason=reason, message="The node was low on resource: memory.")
    if scheduled is not None:
        status["conditions"].append({"type": "PodScheduled", "status": "False",
                                     "reason": "Unschedulable", "message": scheduled[0],
                                     "lastTransitionTime": stamp(scheduled[1])})  # fmt: skip
    state = {}
    if waiting:
        state["waiting"] = {"reason": waiting, "message": 'Back-off pulling image "bad:1"'}
    if terminated:
        state["terminated"] = terminated
    if state:
        status["containerStatuses"] = [{"name": "step", "state": state}]
    return {"metadata": {"name": "train-t1-x7k2p"}, "spec": {"nodeName": "gpu-node-1"},
            "status": status}  # fmt: skip


def status_of(j, pods=(), timeout=600):
    return job_status(j, list(pods), schedule_timeout_s=timeout, now=NOW)


def test_a_completed_job_succeeds_with_its_run_time():
    ended = {"exitCode": 0, "reason": "Completed", "startedAt": stamp(95), "finishedAt": stamp(5)}
    done = status_of(job(("Complete", "True", "Completed")), [pod("Succeeded", terminated=ended)])
    assert done.state == "succeeded"
    assert done.details["run_seconds"] == 90 and done.details["nodes"] == ["gpu-node-1"]
    record = billing(done.details)
    assert record["billable_seconds"] == 90 and record["estimated_cost_usd"] is None


def test_a_condition_whose_status_is_false_does_not_end_the_job():
    assert status_of(job(("Failed", "False", "x"), ("Complete", "False", "y")), [pod()]).state == (
        "running"
    )


def test_an_oom_killed_step_says_so_and_how_to_fix_it():
    ended = {"exitCode": 137, "reason": "OOMKilled"}
    failed = status_of(job(("Failed", "True", "BackoffLimitExceeded")),
                       [pod("Failed", terminated=ended)])  # fmt: skip
    assert failed.state == "failed"
    assert failed.reason.startswith("OOMKilled") and "ResourceSettings(memory" in failed.reason


def test_an_evicted_pod_and_a_deadline_are_told_in_kubernetes_words():
    evicted = status_of(job(("Failed", "True", "BackoffLimitExceeded")),
                        [pod("Failed", reason="Evicted")])  # fmt: skip
    assert evicted.reason.startswith("Evicted") and "low on resource: memory" in evicted.reason
    late = status_of(job(("Failed", "True", "DeadlineExceeded")), [])
    assert late.reason.startswith("DeadlineExceeded") and "activeDeadlineSeconds=900" in late.reason


def test_a_step_that_raised_fails_with_its_exit_code():
    ended = {"exitCode": 1, "reason": "Error"}
    failed = status_of(job(("Failed", "True", "BackoffLimitExceeded")),
                       [pod("Failed", terminated=ended)])  # fmt: skip
    assert failed.reason == "Error: exit code 1"


def test_an_image_that_is_not_there_fails_at_once_a_pull_that_may_recover_waits():
    lost = pod("Pending", waiting="ErrImagePull")
    lost["status"]["containerStatuses"][0]["state"]["waiting"]["message"] = (
        'failed to resolve reference "registry.example.com/ml/train:1": not found'
    )
    failed = status_of(job(), [lost])
    assert failed.state == "failed" and failed.held  # the Job is still there: it is deleted
    assert "ErrImagePull" in failed.reason and "registry.example.com/ml/train:1" in failed.reason
    backing_off = pod("Pending", waiting="ImagePullBackOff")  # a registry's 429 or 5xx, say
    waiting = status_of(job(), [backing_off])
    assert waiting.state == "pending" and '"bad:1"' in waiting.reason  # said while it waits
    backing_off["metadata"]["creationTimestamp"] = stamp(700)
    over = status_of(job(), [backing_off])
    assert over.state == "failed" and over.held and "ImagePullBackOff" in over.reason
    assert status_of(job(), [pod("Pending", waiting="ContainerCreating")]).state == "pending"


def test_a_job_that_makes_no_pod_fails_after_the_schedule_timeout():
    stuck = job()
    stuck["metadata"]["creationTimestamp"] = stamp(30)
    assert status_of(stuck).state == "pending"
    stuck["metadata"]["creationTimestamp"] = stamp(700)
    failed = status_of(stuck)
    assert failed.state == "failed" and failed.held
    assert failed.reason.startswith("NoPods") and "kubectl describe job train-t1" in failed.reason


def test_a_job_its_namespace_refuses_pods_waits_with_the_refusal_then_fails():
    refused = 'Error creating: pods "train-t1-" is forbidden: exceeded quota: gpus, ...'
    stuck = job()
    stuck["metadata"]["creationTimestamp"] = stamp(30)
    waiting = job_status(stuck, [], schedule_timeout_s=600, failed_create=refused, now=NOW)
    assert waiting.state == "pending" and waiting.reason == f"FailedCreate: {refused}"
    stuck["metadata"]["creationTimestamp"] = stamp(700)
    failed = job_status(stuck, [], schedule_timeout_s=600, failed_create=refused, now=NOW)
    assert failed.state == "failed" and failed.held
    assert failed.reason.startswith("FailedCreate") and failed.reason.endswith(refused)
    assert "kubernetes_schedule_timeout is 600 s" in failed.reason


def test_an_unschedulable_pod_waits_with_the_schedulers_words_then_fails():
    message = "0/2 nodes are available: 1 Insufficient nvidia.com/gpu."
    waiting = status_of(job(), [pod("Pending", scheduled=(message, 30))])
    assert waiting.state == "pending" and message in waiting.reason
    over = status_of(job(), [pod("Pending", scheduled=(message, 700))])
    assert over.state == "failed" and over.held
    assert "kubernetes_schedule_timeout" in over.reason and message in over.reason


def test_a_suspended_job_is_queued_and_a_deleted_one_is_stopping():
    queued = status_of(job(("Suspended", "True", "JobSuspended"), suspend=True))
    assert queued.state == "pending" and queued.queued
    assert status_of(job(deleting=True), [pod()]).stopping


def test_a_pod_that_ended_badly_fails_the_step_before_the_job_says_so_without_deleting_it():
    ended = {"exitCode": 1, "reason": "Error"}
    failed = status_of(job(), [pod("Failed", terminated=ended)])
    assert failed.state == "failed" and failed.reason == "Error: exit code 1"
    assert not failed.held  # the Job controller ends it; its record stays for the step cache


def test_a_step_shorter_than_the_kubelets_second_still_has_its_usage():
    ended = {"exitCode": 0, "reason": "Completed", "startedAt": stamp(5), "finishedAt": stamp(5)}
    done = status_of(job(("Complete", "True", "Completed")), [pod("Succeeded", terminated=ended)])
    assert done.details["run_seconds"] == 1.0 and billing(done.details)["billable_seconds"] == 1.0


def test_events_sort_by_their_time_whatever_field_and_precision_says_it():
    from airflow_stepop.backends.kubernetes.job import event_time

    old = {"lastTimestamp": "2026-01-01T10:00:05Z"}
    new = {"eventTime": "2026-01-01T10:00:05.500000Z"}
    made = {"metadata": {"creationTimestamp": "2026-01-01T09:00:00Z"}}
    assert sorted([new, made, old, {}], key=event_time) == [{}, made, old, new]
