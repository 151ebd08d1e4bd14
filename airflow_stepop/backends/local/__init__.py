"""Local: a step runs as a detached process on the worker, or in a local container.

What it needs: a local artifact root (``file://`` or an absolute path) and ``[stepop]
local_jobs_dir`` for job records; container mode (``docker=``) needs a container engine on the
worker. The embedded default: a step runs here before it runs on a cloud.

Where its pieces are:

* ``backend.py``: ``LocalBackend``, the calls both modes answer;
* ``process.py``: process mode (the step's environment, its start, whether it runs, its stop);
* ``supervisor.py``: the local "service" that supervises one step process;
* ``container.py`` and ``container_logs.py``: container mode (docker SDK);
* ``job.py``: what both modes share (code bundle, checkpoints, exit status);
* ``config.py``: the operator's argument rules, checked at parse time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_stepop.backends import lazy_backend

if TYPE_CHECKING:
    from airflow_stepop.backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]
__getattr__ = lazy_backend(__name__, "LocalBackend")
