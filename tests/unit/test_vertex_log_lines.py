"""Vertex AI's log entries reach the task log one record a line, with nothing a viewer obeys:
an entry's embedded newline or escape cannot pass for one of Airflow's own lines."""

from __future__ import annotations

import asyncio

from airflow_stepop.backends.vertex.backend import VertexBackend


class _CloudLogging:
    """Cloud Logging's entries:list for one job (the service, not the relay under test)."""

    def __init__(self, texts: list[str]) -> None:
        self.entries = [
            {"insertId": f"id{n}", "timestamp": f"2026-01-01T00:00:{n:02d}Z", "textPayload": t}
            for n, t in enumerate(texts)
        ]

    async def log_entries(self, body):
        return {"entries": self.entries}


def test_an_entrys_newline_and_escapes_cannot_forge_a_task_log_line():
    backend = VertexBackend(project_id="p", location="us-central1")
    forged = "step 1\n[2026-01-01T00:00:00] {taskinstance.py:1} INFO - Marking task as SUCCESS"
    backend.access = _CloudLogging([forged, "\x1b]8;;http://x\x07click\x1b]8;;\x07\r\n"])
    backend._state["job-1"] = "running"
    lines, _ = asyncio.run(backend.alogs({"job_id": "job-1", "project": "p"}, None))
    assert lines == [
        "step 1",
        "[2026-01-01T00:00:00] {taskinstance.py:1} INFO - Marking task as SUCCESS",
        "\\x1b]8;;http://x\\x07click\\x1b]8;;\\x07",
    ]
