"""A step's first phase in the triggerer when a service builds its image: follow the build, then
create the job (``StepJobTrigger``'s half).

The worker made the job ready (``StepBackend.prepare``: everything staged, the create call's body
JSON) and started or joined the build, then deferred: no worker slot is held while the image
builds. This follows the build as a job is followed (shared poller, log relay into the task log,
the task's deadline, a user's kill stops it) and, the moment the builder reports success, makes
the create call in a thread, so the job starts within one poll of the build's end. A trigger
resumed by another triggerer follows the build again (it has ended: one describe) and repeats
the create, which finds this try's own job (``create`` is idempotent per try).

A failed build ends the trigger with an event of ``phase`` "image" (the task fails with the
builder's reason, the build log's tail and the fix where it is known) before any job exists; a
create the service refuses, with ``phase`` "create"; a job name another try holds, with status
``name_taken`` (the worker submits under another name, as ``submit_as_own`` does).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_stepop.backends.base import JobNameTakenError, NoCapacityError
from airflow_stepop.backends.naming import shown_job
from airflow_stepop.triggers.relay_cursor import CursorStore

CREATE_ATTEMPTS = 5  # a transient failure of the create call is retried this often


class ImagePhase:
    """What ``StepJobTrigger`` inherits to wait for its job's image before creating the job."""

    handle: dict[str, Any]
    image_build: dict[str, Any] | None
    prepared: dict[str, Any] | None
    backend_path: str
    backend_kwargs: dict[str, Any]
    log: Any
    _cursors: CursorStore | None
    _following: tuple[str, dict[str, Any]]
    _creating: asyncio.Future[dict[str, Any]] | None = None

    async def _image_phase(self) -> TriggerEvent | None:
        """Follow the build; None once the job is created (``self.handle`` is then the job's),
        else the event the task ends with."""
        assert self.image_build is not None
        path, kwargs = self.image_build["builder_path"], self.image_build["builder_kwargs"]
        self._following = (path, kwargs)
        self.log.info(
            "The job starts once %s has built its image %s (build %s); no worker slot is held "
            "meanwhile", self.handle.get("builder", "the builder"), self.handle.get("image"),
            self.handle["job_id"],
        )  # fmt: skip
        event, cursors = await self._follow_phase(path, kwargs)  # type: ignore[attr-defined]
        if event.payload["status"] != "succeeded":
            self._cursors = cursors
            event.payload["phase"] = "image"
            event.payload["hint"] = await asyncio.to_thread(self._hint, event.payload)
            return event
        self.log.info("Image %s is built: creating the job", self.handle.get("image"))
        return await self._create_job()

    def _hint(self, payload: dict[str, Any]) -> str | None:
        from airflow_stepop.triggers.services import load_backend

        try:
            builder = load_backend(*self._following)
            return builder.hint(payload.get("reason") or "", list(payload.get("log_tail") or []))
        except Exception:  # a hint is a courtesy: never the reason a failure is not told
            return None

    async def _create_job(self) -> TriggerEvent | None:
        from airflow_stepop.triggers.services import load_backend

        backend = await asyncio.to_thread(load_backend, self.backend_path, self.backend_kwargs)
        build = self.handle
        failures = 0
        while True:
            # shielded: a kill that cancels this trigger meanwhile waits for the answer in
            # on_kill (``created_meanwhile``) and stops the job it made
            self._creating = asyncio.ensure_future(asyncio.to_thread(backend.create, self.prepared))
            try:
                handle = await asyncio.shield(self._creating)
                break
            except JobNameTakenError as exc:
                return self._create_event("name_taken", str(exc), build)
            except NoCapacityError as exc:  # the worker fails over to the next machine type
                return self._create_event("no_capacity", exc.reason, build)
            except Exception as exc:
                failures += 1
                if not backend.is_transient(exc) or failures >= CREATE_ATTEMPTS:
                    return self._create_event("failed", f"{type(exc).__name__}: {exc}", build)
                await self._back_off("Creating the job", exc, failures)  # type: ignore[attr-defined]
        self._creating = None
        self._cursors = None  # the build's: a kill now relays the job's log from its start
        # the worker stores the job's console links when the task resumes
        self.handle = {**handle, "submitted_at": time.time(), "after_image_build": True}
        self.log.info("Submitted job %s", shown_job(self.handle))
        return None

    @staticmethod
    def _create_event(status: str, reason: str, build: dict[str, Any]) -> TriggerEvent:
        return TriggerEvent(
            {"status": status, "phase": "create", "reason": reason, "handle": build,
             "log_tail": []}
        )  # fmt: skip

    async def created_meanwhile(self, timeout: float) -> dict[str, Any] | None:
        """The job a create still on its way made (a kill came meanwhile), waited for up to
        ``timeout`` seconds; None when no create is on its way or it made none."""
        creating = self._creating
        if creating is None:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(creating), timeout)
        except Exception:
            return None
