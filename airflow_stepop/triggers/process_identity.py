"""Which process this is, so a trigger knows whether it runs where its task deferred.

The deferral records it (``deferred_by``) in the worker; the trigger compares it with its own
where it runs: equal only in the process that deferred (``dag.test()``, ``airflow dags test``),
where no resumed try can race the executor and the resume hold is skipped.
"""

from __future__ import annotations

import os

_PROCESS_TOKEN = os.urandom(8).hex()


def this_process() -> str:
    """This process: its pid, and a random token (pids repeat across hosts and containers; a
    forked child has the token but not the pid)."""
    return f"{os.getpid()}-{_PROCESS_TOKEN}"
