"""A StepBackend double for trigger and poller tests: the calls they do not exercise."""

from __future__ import annotations

from airflow_stepop.backends.base import StepBackend


class TriggerSideBackend(StepBackend):
    """No worker side (submit, find, stop) and a log with no lines; subclasses answer status."""

    first_poll_seconds = 0.01

    def serialize(self):
        return {}

    def submit(self, request):
        raise NotImplementedError

    def find_active(self, task_key):
        return None

    def job_record(self, job_id):
        raise NotImplementedError

    def stop(self, handle):
        raise NotImplementedError

    async def astop(self, handle):
        return None

    async def alogs(self, handle, cursor):
        return [], cursor
