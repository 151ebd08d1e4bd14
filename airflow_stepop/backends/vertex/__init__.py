"""Vertex AI: a step runs as a Vertex AI CustomJob.

What it needs: the google provider's connection (``gcp_conn_id``; key, ADC or impersonation),
a project and location, a Cloud Storage artifact root (the job reads it through the Cloud Storage
FUSE mount, so its image needs no Google SDK), and an Artifact Registry repository for built
environment images. docs/vertex.md lists the IAM roles.

Where its pieces are:

* ``backend.py``: ``VertexBackend``, the worker's JobService calls;
* ``triggerer_calls.py``: the triggerer's (states, Cloud Logging lines, cancel);
* ``config.py``: the operator's argument rules, checked at parse time;
* ``machines.py``: machine types and which accelerators go with them;
* ``job.py``: the CustomJob request, its labels, its facts and its cost;
* ``api.py``: the clients, built from the connection;
* ``entry.py``: the job's entry point (standard library only; it runs inside the job);
* ``catalog.csv``: custom-training machine types, hardware and dated prices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_stepop.backends import lazy_backend

if TYPE_CHECKING:
    from airflow_stepop.backends.vertex.backend import VertexBackend

__all__ = ["VertexBackend"]
__getattr__ = lazy_backend(__name__, "VertexBackend")
