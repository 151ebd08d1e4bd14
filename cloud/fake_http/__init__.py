"""HTTP plumbing shared by the service fakes: routing, counters, faults.

The SageMaker, Vertex AI and Azure ML fakes are plain ``ThreadingHTTPServer``s (no framework:
the official clients only need HTTP/1.1 and JSON). This module holds what they have in common:

* :class:`Router`: ``(method, regex) -> handler`` with an operation name per route, so every
  API call is counted under the service's own operation name (``CreateCustomJob``,
  ``Jobs_CreateOrUpdate``...).
* :class:`FaultBook`: fault rules settable at run time through the control API. Rates are
  deterministic (an accumulator, not a random draw), so a test that sets ``rate: 0.5`` sees
  exactly every second call fail: no flakiness.
* the control API under ``/_fake/``:

  ``GET  /_fake/health``    ``{"ok": true, "service": ...}``
  ``GET  /_fake/counters``  ``{"counters": {"<Operation>": n, ...}}``
  ``POST /_fake/faults``    one rule, or ``{"faults": [rule, ...], "replace": false}``
  ``GET  /_fake/faults``    the rules now in force
  ``DELETE /_fake/faults``  clear the rules
  ``POST /_fake/reset``     clear rules and counters (``{"jobs": true}`` also forgets jobs)
  ``GET|POST /_fake/mode``  the runner mode of new jobs, ``{"mode": "process"|"container"}``
  ``GET|POST /_fake/page_size``  the most jobs one list page holds, ``{"size": n}``, in fakes
                            with job lists (Vertex AI, Azure ML); a reset restores it

Fault rules (``kind`` picks the behaviour; unknown kinds are refused with 400):

``{"kind": "throttle", "operation": "*", "rate": 1.0, "count": null}``
    answer with the service's real throttling error (Vertex: 429 RESOURCE_EXHAUSTED;
    ARM: 429 with ``Retry-After``).
``{"kind": "error", "status": 503, "operation": "*", "rate": 1.0, "count": null}``
    answer with a 5xx in the service's error shape.
``{"kind": "provisioning_delay", "seconds": 3}``
    jobs stay queued/provisioning that much longer before they start.
``{"kind": "job_failure", "reason": "...", "code": ..., "match": null, "count": 1}``
    the next matching job (name or display name contains ``match``) fails with that reason
    instead of running.
``{"kind": "preempt", "after_seconds": 0.5, "match": null, "count": 1}``
    spot preemption of a running job (what happens next is the service's rule; see the fake).
    Each fake checks these rules all along a running attempt, so one added while the job runs
    preempts it; ``after_seconds`` delays it (Vertex, Azure ML: after the attempt took the rule,
    default 0.5; SageMaker: once the job has that many billable seconds, default 0).
``{"kind": "log_delay", "seconds": 2}``
    log lines become readable only that long after they were written, for as long as the rule
    stands: clearing the faults releases every line held back.
``{"kind": "capacity", "machine": "<type>", "at": ..., "region": null, "count": null}``
    the service has none of that machine (SageMaker ``ResourceConfig.InstanceType``, Vertex
    ``machineSpec.machineType`` or ``acceleratorType``, Azure ML the job's VM size; compared
    case-insensitively) for every matching job, or the next ``count``: each fake answers with
    its service's own signal at ``at`` (SageMaker: ``provision``, the default, fails the job with
    ``CapacityError``; ``create`` refuses CreateTrainingJob with ``ResourceLimitExceeded``.
    Vertex: ``provision``, the default, fails the job with code 8 "Resources are insufficient in
    region" (a FLEX_START job waits for the shortage to end instead, up to its
    ``maxWaitDuration``: :meth:`FaultBook.standing`); ``create`` answers 429 RESOURCE_EXHAUSTED
    "The following quota metrics exceed quota limits". Azure ML: ``queue``, the default, holds
    the job Queued with the capacity warning until it is cancelled; ``provision`` fails it with
    the vCPU quota error). ``region`` limits it
    to one region (SageMaker: the request's signing region; Vertex: the location; Azure ML: the
    workspace's), ``match`` to jobs whose name contains it, ``seconds`` is how long the job
    stays provisioning first, ``reason`` (and ``code``) replace the service's message.

``operation`` is an operation name or ``"*"``; ``count`` is how many times the rule fires before
it retires itself (default: no limit; 1 for ``job_failure`` and ``preempt``; ``null`` for no
limit). A fake may add kinds of its own (:attr:`FaultBook.own_kinds`, each with its default
``count``), taken like the job kinds: the Kubernetes fake's ``evict``, ``oom_kill`` and
``image_pull``.

A route may answer with a stream (:attr:`Response.stream`): the server sends it chunked as it
comes, for answers that stay open (a watch, a followed log).

Where each part lives: :mod:`~cloud.fake_http.routing` (:class:`Request`, :class:`Response`,
:class:`Router`, :func:`rfc3339`), :mod:`~cloud.fake_http.faults` (:class:`FaultBook`),
:mod:`~cloud.fake_http.service` (:class:`FakeService`: the control API and dispatch),
:mod:`~cloud.fake_http.paging` (:class:`PageSize`: ``/_fake/page_size``),
:mod:`~cloud.fake_http.server` (:class:`FakeServer`) and :mod:`~cloud.fake_http.tls` (the
self-signed certificate). Every name is importable from ``cloud.fake_http`` itself.
"""

from cloud.fake_http.faults import JOB_FAULT_KINDS, REQUEST_FAULT_KINDS, FaultBook
from cloud.fake_http.paging import PageSize
from cloud.fake_http.routing import Handler, Request, Response, Route, Router, rfc3339
from cloud.fake_http.server import FakeServer
from cloud.fake_http.service import FakeService
from cloud.fake_http.tls import self_signed_cert

__all__ = [
    "JOB_FAULT_KINDS",
    "REQUEST_FAULT_KINDS",
    "FakeServer",
    "FakeService",
    "FaultBook",
    "Handler",
    "PageSize",
    "Request",
    "Response",
    "Route",
    "Router",
    "rfc3339",
    "self_signed_cert",
]
