"""The fault matrix: each fault a step can meet, per backend, and the test that proves it.

Every row is a test of the suite that injects the fault (through ``dag.test()``, the emulated
clouds' fault rules, or a trigger run twice) and asserts the row's claims: how many jobs were
created, that no artifact was lost, and that the job was stopped when the task was. This
script runs those tests (``pytest``) and prints the table with each row's outcome.

    make cloud-up            # the cloud rows need the engine's registry and the emulators
    .venv/bin/python bench/fault_matrix.py [--backend local|sagemaker|vertex|azureml|kubernetes]
                                           [--quick]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCAL = "tests/e2e/test_local_steps.py"
FAULTS = "tests/e2e/test_faults.py"
LOCAL_BACKEND = "tests/integration/test_local_backend.py"
SAGEMAKER = "tests/integration/sagemaker/test_sagemaker_steps.py"
VERTEX = "tests/integration/vertex/test_vertex_steps.py"
AZUREML = "tests/integration/azureml/test_azureml_steps.py"
KUBERNETES = "tests/integration/kubernetes/test_kubernetes_retries.py"
K8S_FAULTS = "tests/integration/kubernetes/test_kubernetes_faults.py"
K8S_STEPS = "tests/integration/kubernetes/test_kubernetes_steps.py"
K8S_REWRITES = "tests/integration/kubernetes/test_kubernetes_rewritten_after_submit.py"
RESUMED = "test_a_trigger_resumed_by_another_triggerer_continues_the_relay_where_it_stopped"
BACKENDS = ("local", "sagemaker", "vertex", "azureml", "kubernetes")
# --quick: a smoke run of the real machinery, two faults of the local backend by default (each
# test takes about a second: a failure after the submit under dag.test(), a user's kill of a
# running job through its trigger); --backend picks another backend's rows of these faults
QUICK_FAULTS = ("failure in execute() after submit, no retry left", "user kill")
QUICK = {"backend": "local"}
QUICK_HELP = f"a smoke run of a few seconds: the rows of {QUICK_FAULTS} of --backend (local)"


@dataclass(frozen=True)
class Row:
    fault: str
    backend: str
    test: str
    jobs: str  # jobs created per task instance, as the test asserts
    stopped: str  # whether the job was stopped when the task was


ROWS = [
    Row("worker killed between submit and defer", "local",
        f"{LOCAL}::test_a_retry_reattaches_to_the_running_job", "1 (re-attached)", "n/a"),
    Row("worker killed between submit and defer", "sagemaker",
        f"{SAGEMAKER}::test_a_retry_reattaches_to_the_running_job_with_one_create",
        "1 (re-attached)", "n/a"),
    Row("worker killed between submit and defer", "vertex",
        f"{VERTEX}::test_a_retry_reattaches_to_the_running_job_with_one_create",
        "1 (re-attached)", "n/a"),
    Row("worker killed between submit and defer", "azureml",
        f"{AZUREML}::test_a_retry_reattaches_to_the_running_job_with_one_job",
        "1 (re-attached)", "n/a"),
    Row("worker killed between submit and defer", "kubernetes",
        f"{KUBERNETES}::test_a_retry_reattaches_to_the_running_job_with_one_create",
        "1 (re-attached)", "n/a"),
    Row("failure in execute() after submit, no retry left", "local",
        f"{FAULTS}::test_a_failure_after_submit_with_no_retry_left_stops_the_job", "1", "yes"),
    Row("failure in execute() after submit, no retry left", "sagemaker",
        f"{SAGEMAKER}::test_a_failure_after_submit_with_no_retry_left_stops_the_training_job",
        "1", "yes"),
    Row("failure in execute() after submit, no retry left", "vertex",
        f"{VERTEX}::test_a_failure_after_submit_with_no_retry_left_cancels_the_custom_job", "1",
        "yes"),
    Row("failure in execute() after submit, no retry left", "azureml",
        f"{AZUREML}::test_a_failure_after_submit_with_no_retry_left_stops_the_job", "1", "yes"),
    Row("failure in execute() after submit, no retry left", "kubernetes",
        f"{KUBERNETES}::test_a_failure_after_submit_with_no_retry_left_deletes_the_job", "1",
        "yes"),
    Row("worker killed after the job succeeded", "local",
        f"{FAULTS}::test_a_retry_after_the_job_succeeded_returns_its_result_without_a_second_job",
        "1 (result reused)", "n/a"),
    Row("worker killed after the job succeeded", "sagemaker",
        f"{SAGEMAKER}::test_a_retry_after_the_job_succeeded_returns_its_result_with_one_create",
        "1 (result reused)", "n/a"),
    Row("worker killed after the job succeeded", "vertex",
        f"{VERTEX}::test_a_retry_after_the_job_succeeded_returns_its_result_with_one_create",
        "1 (result reused)", "n/a"),
    Row("worker killed after the job succeeded", "azureml",
        f"{AZUREML}::test_a_retry_after_the_job_succeeded_returns_its_result_with_one_job",
        "1 (result reused)", "n/a"),
    Row("worker killed after the job succeeded", "kubernetes",
        f"{KUBERNETES}::test_a_retry_after_the_job_succeeded_returns_its_result_with_one_create",
        "1 (result reused)", "n/a"),
    Row("DAG run deleted and triggered again with the same run_id", "local",
        "tests/e2e/test_recreated_run.py::test_a_run_deleted_and_triggered_again_with_the_same_"
        "run_id_makes_new_local_jobs", "1 per run (new name, new run dir)", "n/a"),
    Row("DAG run deleted and triggered again with the same run_id", "sagemaker",
        "tests/e2e/test_recreated_run.py::test_a_run_deleted_and_triggered_again_with_the_same_"
        "run_id_makes_new_sagemaker_jobs", "1 per run (new name, new run dir)", "n/a"),
    Row("DAG run deleted and triggered again with the same run_id", "vertex",
        "tests/e2e/test_recreated_run.py::test_a_run_deleted_and_triggered_again_with_the_same_"
        "run_id_makes_new_vertex_jobs", "1 per run (new name, new run dir)", "n/a"),
    Row("DAG run deleted and triggered again with the same run_id", "azureml",
        "tests/e2e/test_recreated_run.py::test_a_run_deleted_and_triggered_again_with_the_same_"
        "run_id_makes_new_azureml_jobs", "1 per run (new name, new run dir)", "n/a"),
    Row("DAG run deleted and triggered again with the same run_id", "kubernetes",
        f"{KUBERNETES}::test_a_run_deleted_and_triggered_again_with_the_same_run_id_makes_new_"
        "jobs", "1 per run (new name, new run dir)", "n/a"),
    Row("triggerer killed and restarted mid-job", "local",
        f"{LOCAL_BACKEND}::{RESUMED}", "1 (no line relayed twice)", "n/a"),
    Row("triggerer killed and restarted mid-job", "sagemaker",
        f"{SAGEMAKER}::{RESUMED}", "1 (no line relayed twice)", "n/a"),
    Row("triggerer killed and restarted mid-job", "vertex",
        f"{VERTEX}::{RESUMED}", "1 (no line relayed twice)", "n/a"),
    Row("triggerer killed and restarted mid-job", "azureml",
        f"{AZUREML}::{RESUMED}", "1 (no line relayed twice)", "n/a"),
    Row("triggerer killed and restarted mid-job", "kubernetes",
        f"{KUBERNETES}::{RESUMED}", "1 (no line relayed twice)", "n/a"),
    Row("20% API throttling", "sagemaker",
        f"{SAGEMAKER}::test_throttling_on_a_fifth_of_the_calls_still_succeeds", "1 per step",
        "n/a"),
    Row("20% API throttling", "vertex",
        f"{VERTEX}::test_throttling_on_a_fifth_of_the_calls_still_succeeds", "1 per step", "n/a"),
    Row("20% API throttling", "azureml",
        f"{AZUREML}::test_throttling_on_a_fifth_of_the_calls_still_succeeds", "1 per step",
        "n/a"),
    Row("20% API throttling", "kubernetes",
        f"{KUBERNETES}::test_throttling_on_a_fifth_of_the_calls_still_succeeds", "1 per step",
        "n/a"),
    Row("API throttling (429) of the Job's or Secret's create", "kubernetes",
        f"{KUBERNETES}::test_a_create_the_api_server_throttles_is_asked_again_after_its_retry_"
        "after", "1 (asked again after Retry-After)", "n/a"),
    Row("API 5xx beyond the client's retries", "sagemaker",
        f"{SAGEMAKER}::test_a_run_of_5xx_answers_longer_than_the_client_retries_is_waited_out",
        "1", "n/a"),
    Row("API 5xx beyond the client's retries", "kubernetes",
        f"{KUBERNETES}::test_a_run_of_5xx_answers_longer_than_the_client_retries_is_waited_out",
        "1", "n/a"),
    Row("object-store 5xx on write and read (every first call)", "any",
        "tests/unit/test_storage_retry.py::test_staging_a_step_and_reading_back_survive_a_503_on_"
        "every_first_call", "n/a (staging, result, load)", "n/a"),
    Row("tasks on one worker loading one artifact at once", "any",
        "tests/unit/test_artifact_cache.py::test_many_processes_loading_one_artifact_at_once_"
        "download_it_once", "n/a (one download, every load verified)", "n/a"),
    Row("worker's artifact cache past its bound, an entry in use", "any",
        "tests/unit/test_artifact_cache.py::test_an_artifact_another_task_is_using_is_never_"
        "evicted", "n/a (LRU eviction, the used entry kept)", "n/a"),
    Row("artifact changed in the store after the step wrote it", "any",
        "tests/unit/test_artifact_cache.py::test_a_changed_artifact_in_the_store_never_takes_its_"
        "place_in_the_cache", "n/a (refused, nothing cached)", "n/a"),
    Row("directory artifact with a key outside it ('..', absolute, backslash)", "any",
        "tests/unit/test_artifact_cache.py::test_keys_a_directory_artifact_may_not_hold_are_"
        "refused_before_any_download", "n/a (refused, nothing written)", "n/a"),
    Row("step spec rewritten in the bucket after submit", "any",
        "tests/unit/test_job_trust.py::test_a_spec_rewritten_after_submit_fails_the_step_before_"
        "it_runs", "1 (fails before the step runs)", "n/a"),
    Row("code bundle changed on a mounted bucket between its check and its read", "any",
        "tests/unit/test_job_trust.py::test_a_bundle_changed_between_its_check_and_its_"
        "extraction_never_runs", "1 (runs the verified code)", "n/a"),
    Row("extracted code in the job's cache changed after an earlier job", "local",
        "tests/unit/test_job_trust.py::test_code_extracted_by_an_earlier_job_is_reused_only_"
        "while_it_matches", "1 (extracted afresh)", "n/a"),
    Row("job cache directory others may write", "local",
        "tests/unit/test_job_trust.py::test_a_cache_directory_others_may_write_is_refused_naming_"
        "it", "1 (fails, naming it)", "n/a"),
    Row("result.json and its pickle rewritten in the bucket", "any",
        "tests/unit/test_worker_unpickle.py::test_a_plain_task_does_not_unpickle_a_steps_pickle_"
        "by_default", "n/a (not unpickled on the worker)", "n/a"),
    Row("job failure (the step raises)", "local",
        f"{LOCAL}::test_a_raising_step_fails_the_task_with_the_remote_exception", "1", "n/a"),
    Row("job failure (the step raises)", "sagemaker",
        f"{SAGEMAKER}::test_a_raising_step_fails_with_the_remote_exception_and_the_failure_reason",
        "1", "n/a"),
    Row("job failure (the step raises)", "vertex",
        f"{VERTEX}::test_a_raising_step_fails_with_the_remote_exception_and_the_job_error",
        "1", "n/a"),
    Row("job failure (the step raises)", "azureml",
        f"{AZUREML}::test_a_raising_step_fails_with_the_remote_exception", "1", "n/a"),
    Row("job failure (the step raises)", "kubernetes",
        f"{K8S_STEPS}::test_a_raising_step_fails_with_its_exception_type_and_message", "1", "n/a"),
    Row("spot interruption", "sagemaker",
        f"{SAGEMAKER}::test_a_spot_interruption_resumes_from_the_checkpoint",
        "1 (resumed from its checkpoint)", "n/a"),
    Row("spot interruption", "vertex",
        f"{VERTEX}::test_a_spot_preemption_resumes_from_the_checkpoint",
        "1 (resumed from its checkpoint)", "n/a"),
    Row("spot interruption", "azureml",
        f"{AZUREML}::test_a_spot_preemption_resumes_from_the_checkpoint",
        "1 (resumed from its checkpoint)", "n/a"),
    Row("pod evicted from its node", "kubernetes",
        f"{K8S_FAULTS}::test_an_evicted_pod_fails_the_step_in_kubernetes_words",
        "1 (fails: Evicted)", "n/a"),
    Row("container OOM-killed", "kubernetes",
        f"{K8S_FAULTS}::test_an_oom_killed_step_fails_saying_so", "1 (fails: OOMKilled)", "n/a"),
    Row("image that cannot be pulled", "kubernetes",
        f"{K8S_FAULTS}::test_an_image_that_cannot_be_pulled_fails_the_step_naming_it",
        "1 (fails at once, naming it)", "yes"),
    Row("no node fits the pod", "kubernetes",
        f"{K8S_FAULTS}::test_a_pod_no_node_fits_says_why_then_fails_after_the_schedule_timeout",
        "1 (fails after schedule_timeout)", "n/a"),
    Row("max_runtime passed (activeDeadlineSeconds)", "kubernetes",
        f"{K8S_FAULTS}::test_a_step_past_its_max_runtime_fails_with_the_deadline",
        "1 (fails: DeadlineExceeded)", "n/a"),
    Row("user kill", "local", f"{LOCAL_BACKEND}::test_user_kill_stops_the_job", "1", "yes"),
    Row("user kill", "sagemaker", f"{SAGEMAKER}::test_a_user_kill_stops_the_training_job", "1",
        "yes"),
    Row("user kill", "vertex", f"{VERTEX}::test_a_user_kill_cancels_the_custom_job", "1", "yes"),
    Row("user kill", "azureml", f"{AZUREML}::test_a_user_kill_cancels_the_job", "1", "yes"),
    Row("user kill", "kubernetes",
        f"{K8S_FAULTS}::test_a_users_kill_deletes_the_job_and_relays_its_last_lines", "1", "yes"),
    Row("execution_timeout", "local", f"{LOCAL}::test_execution_timeout_stops_the_job", "1",
        "yes"),
    Row("execution_timeout", "sagemaker",
        f"{SAGEMAKER}::test_the_execution_timeout_stops_the_job_before_its_max_runtime", "1",
        "yes"),
    Row("execution_timeout", "vertex", f"{VERTEX}::test_execution_timeout_cancels_the_custom_job",
        "1", "yes"),
    Row("execution_timeout", "azureml", f"{AZUREML}::test_the_execution_timeout_cancels_the_job",
        "1", "yes"),
    Row("execution_timeout", "kubernetes",
        f"{KUBERNETES}::test_the_execution_timeout_deletes_the_job_and_relays_its_last_lines", "1",
        "yes"),
    Row("a job of the step's name started by another run's try", "local",
        "tests/unit/test_job_identity.py::test_the_operator_submits_under_another_name_when_"
        "another_try_holds_its_own", "1 (a new name, never attached)", "n/a"),
    Row("code bundle, entry script or launch document rewritten after submit", "sagemaker",
        "tests/unit/test_sagemaker_backend.py::test_a_file_rewritten_in_the_bucket_after_submit_"
        "never_runs", "1 (fails, nothing of it ran)", "n/a"),
    Row("a secret in what a step captures, its args or image", "any",
        "tests/e2e/test_secret_steps.py::test_a_connection_read_at_module_level_is_not_uploaded_"
        "with_the_step", "0 (refused before any upload or build)", "n/a"),
    Row("poll_interval NaN, inf or out of its range", "any",
        "tests/unit/test_finite_arguments.py::test_a_dag_file_with_a_nan_poll_interval_fails_its_"
        "import_naming_it", "0 (refused at DAG parse)", "n/a"),
    Row("a step prints gigabytes without newlines", "local",
        "tests/integration/test_local_log_bounds.py::test_a_step_printing_far_more_than_the_bound_"
        "without_newlines_keeps_the_relay_bounded", "1 (bounded, each byte once)",
        "n/a"),
    Row("a step prints gigabytes without newlines", "local",
        "tests/unit/test_container_log_bounds.py::test_a_long_line_without_newlines_is_relayed_"
        "in_bounded_reads_each_byte_once", "1 (container, each byte once)",
        "n/a"),
    Row("a step prints gigabytes without newlines", "sagemaker",
        "tests/integration/sagemaker/test_sagemaker_log_bounds.py::test_a_finished_jobs_long_log_"
        "is_read_a_bounded_number_of_pages_at_a_time", "1 (8 pages a read, each once)",
        "n/a"),
    Row("poll_interval NaN or inf in a stored trigger", "any",
        "tests/unit/test_trigger_waits.py::test_a_trigger_given_a_bad_poll_interval_yields_to_"
        "other_tasks_and_polls_at_bounds", "1 (polled at a bounded interval, the loop yields)",
        "n/a"),
    Row("the worker's clock an hour off", "any",
        "tests/unit/test_step_deadline.py::test_a_skewed_worker_clock_neither_ends_the_job_early_"
        "nor_lets_it_run_longer", "1 (stopped at its execution_timeout)", "yes"),
    Row("triggerer restarted during a job with execution_timeout", "any",
        "tests/unit/test_step_deadline.py::test_a_trigger_resumed_by_another_triggerer_keeps_the_"
        "deadline_of_the_first", "1 (stopped at the first trigger's deadline)", "yes"),
    Row("a line break in a DockerSettings field", "any",
        "tests/unit/test_dockerfile_inputs.py::test_a_line_break_or_a_reserved_name_is_refused_"
        "naming_the_field", "0 (refused at DAG parse)", "n/a"),
    Row("$, quotes, backslashes, line breaks in an image's environment", "local",
        "tests/integration/test_image_environment.py::test_an_engine_build_bakes_every_value_"
        "exactly", "0 (an image, every value exact)", "n/a"),
    Row("an Azure ML connection with a client id and no secret", "azureml",
        "tests/unit/test_azureml_half_principal.py::test_half_a_service_principal_is_refused_"
        "naming_the_empty_field_and_the_fix", "0 (refused before any call)", "n/a"),
    Row("code bundle / spec rewritten in the bucket after submit", "local",
        "tests/integration/test_local_rewritten_after_submit.py::test_a_bundle_rewritten_after_"
        "staging_fails_the_process_job_before_any_of_it_runs", "1 (fails, nothing of it ran)",
        "n/a"),
    Row("code bundle / spec rewritten in the bucket after submit", "local",
        "tests/integration/test_local_rewritten_after_submit.py::test_a_spec_rewritten_after_"
        "staging_fails_the_process_job_before_it_is_read", "1 (fails, nothing of it ran)", "n/a"),
    Row("code bundle / spec rewritten in the bucket after submit", "local",
        "tests/integration/test_local_rewritten_after_submit.py::test_a_bundle_rewritten_after_"
        "staging_fails_the_container_job_before_any_of_it_runs",
        "1 (container, fails, nothing ran)", "n/a"),
    Row("code bundle / spec / entry / launch rewritten after submit", "sagemaker",
        "tests/integration/sagemaker/test_sagemaker_rewritten_after_submit.py::test_a_file_"
        "rewritten_in_s3_after_submit_fails_the_job_before_any_of_it_runs",
        "1 (fails, nothing of it ran)", "n/a"),
    Row("code bundle / spec / entry rewritten after submit", "vertex",
        "tests/integration/vertex/test_vertex_rewritten_after_submit.py::test_a_file_rewritten_"
        "in_gcs_after_submit_fails_the_job_before_any_of_it_runs",
        "1 (fails, nothing of it ran)", "n/a"),
    Row("code bundle / spec / entry / launch rewritten after submit", "azureml",
        "tests/integration/azureml/test_azureml_rewritten_after_submit.py::test_a_file_rewritten_"
        "in_blob_storage_after_submit_fails_the_job_before_any_of_it_runs",
        "1 (fails, nothing of it ran)", "n/a"),
    Row("code bundle / spec rewritten after submit", "kubernetes",
        f"{K8S_REWRITES}::test_a_file_rewritten_in_s3_after_submit_fails_the_job_before_any_of_"
        "it_runs", "1 (fails, nothing of it ran)", "n/a"),
    Row("result.json and its pickle rewritten in the bucket", "local",
        "tests/integration/test_local_rewritten_after_submit.py::test_a_rewritten_result_and_"
        "pickle_are_never_unpickled_on_the_worker", "1 (not unpickled on the worker)", "n/a"),
    Row("result.json and its pickle rewritten in the bucket", "sagemaker",
        "tests/integration/sagemaker/test_sagemaker_rewritten_after_submit.py::test_a_rewritten_"
        "result_and_pickle_in_s3_are_never_unpickled_on_the_worker",
        "1 (not unpickled on the worker)", "n/a"),
    Row("result.json and its pickle rewritten in the bucket", "vertex",
        "tests/integration/vertex/test_vertex_rewritten_after_submit.py::test_a_rewritten_result_"
        "and_pickle_are_never_unpickled_on_the_worker", "1 (not unpickled on the worker)", "n/a"),
    Row("result.json and its pickle rewritten in the bucket", "azureml",
        "tests/integration/azureml/test_azureml_rewritten_after_submit.py::test_a_rewritten_"
        "result_and_pickle_are_never_unpickled_on_the_worker", "1 (not unpickled on the worker)",
        "n/a"),
    Row("result.json and its pickle rewritten in the bucket", "kubernetes",
        f"{K8S_REWRITES}::test_a_rewritten_result_and_pickle_are_never_unpickled_on_the_worker",
        "1 (not unpickled on the worker)", "n/a"),
    Row("capacity error on the first type", "sagemaker",
        "tests/integration/sagemaker/test_sagemaker_capacity.py::test_no_capacity_for_the_"
        "cheapest_type_runs_the_step_on_the_next_one", "2 (refused, then the next type ran)",
        "n/a"),
    Row("capacity error on the first type", "vertex",
        "tests/integration/vertex/test_vertex_capacity.py::test_no_capacity_for_the_cheapest_"
        "machine_runs_the_step_on_the_next_one", "2 (refused, then the next type ran)", "n/a"),
    Row("capacity error on the first type", "azureml",
        "tests/integration/azureml/test_azureml_capacity.py::test_a_spent_quota_for_the_"
        "cheapest_size_runs_the_step_on_the_next_one", "2 (refused, then the next size ran)",
        "n/a"),
]  # fmt: skip


def run(rows: list[Row]) -> dict[str, str]:
    """pytest outcome per test id: passed, failed, error or skipped."""
    # a report of this run's own: one left by an earlier run (or another run at the same time)
    # would show its outcomes for tests this run's pytest never reported
    with tempfile.TemporaryDirectory(prefix="stepop-fault-matrix-") as tmp:
        report = Path(tmp) / "fault-matrix.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   f"--junitxml={report}", *sorted({r.test for r in rows})]  # fmt: skip
        done = subprocess.run(command, cwd=ROOT, check=False)
        if not report.exists():
            sys.exit(f"pytest wrote no report (exit status {done.returncode}): see above")
        cases = list(ET.parse(report).getroot().iter("testcase"))
    outcomes: dict[str, str] = {}
    for case in cases:
        path = case.get("classname", "").replace(".", "/") + ".py"
        test_id = f"{path}::{case.get('name')}"
        kinds = {child.tag for child in case}
        outcome = next((k for k in ("failure", "error", "skipped") if k in kinds), "passed")
        outcomes[test_id] = {"failure": "failed"}.get(outcome, outcome)
        # a row may name a parametrized test whole: it survived when every case did
        base = test_id.split("[", 1)[0]
        if base != test_id and outcomes.get(base, "passed") == "passed":
            outcomes[base] = outcomes[test_id]
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=BACKENDS, default=None)
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    args = parser.parse_args()
    if args.quick:  # its backend becomes the default: --backend given still wins
        parser.set_defaults(**QUICK)
        args = parser.parse_args()
    rows = [r for r in ROWS if args.backend in (None, r.backend) or r.backend == "any"]
    if args.quick:
        rows = [r for r in rows if r.fault in QUICK_FAULTS]
    outcomes = run(rows)
    print(f"\n{'fault':52s} {'backend':10s} {'outcome':9s} {'jobs':30s} {'lost':5s} stopped")
    for row in rows:
        outcome = outcomes.get(row.test, "not run")
        shown = "survived" if outcome == "passed" else outcome.upper()
        print(f"{row.fault:52s} {row.backend:10s} {shown:9s} {row.jobs:30s} {'none':5s} "
              f"{row.stopped}")  # fmt: skip
    survived = sum(outcomes.get(r.test) == "passed" for r in rows)
    print(f"\n{survived} of {len(rows)} rows survived")
    sys.exit(0 if survived == len(rows) else 1)


if __name__ == "__main__":
    main()
