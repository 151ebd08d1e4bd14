"""ARM's shapes for the Azure ML fake: resource paths, error bodies, ``systemData``.

Every handler of the fake raises :class:`ArmError` (or :func:`bad` / :func:`invalid`) to refuse
a request; ``AzureMLService.dispatch`` turns it into the ``{"error": {...}}`` body that
azure-core reads into an ``HttpResponseError``. The constants name the workspace path that
every route sits under.
"""

from __future__ import annotations

import re
from typing import Any

from cloud.fake_http import Request, Response, rfc3339

PROVIDER = "Microsoft.MachineLearningServices"
SEG = r"[^/]+"
# ``{WS}`` of the routes: one workspace, with named groups sub, rg and ws.
WS = (
    rf"/subscriptions/(?P<sub>{SEG})/[Rr]esource[Gg]roups/(?P<rg>{SEG})/providers/"
    rf"{PROVIDER}/workspaces/(?P<ws>{SEG})"
)


class ArmError(Exception):
    """A refusal in ARM's error shape."""

    def __init__(self, status: int, code: str, message: str, inner: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.inner = inner


def arm_error(
    status: int,
    code: str,
    message: str,
    inner: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """``{"error": {"code", "message", "details": [], "innerError"?}}`` as ARM/MFE answer."""
    err: dict[str, Any] = {"code": code, "message": message, "details": []}
    if inner:
        err["innerError"] = {"code": inner}
    return Response(status, {"error": err}, headers=headers or {})


def bad(message: str, inner: str = "BadArgument") -> ArmError:
    """A 400 UserError (what MFE answers for a request it understood and refuses)."""
    return ArmError(400, "UserError", message, inner)


def invalid(message: str) -> ArmError:
    """A 400 ValidationError (what MFE answers for a body that breaks the schema)."""
    return ArmError(400, "ValidationError", message)


def read_json(req: Request) -> dict[str, Any]:
    """The request body as a JSON object, or the ValidationError MFE answers."""
    try:
        body = req.json()
    except ValueError as exc:
        raise invalid(f"The request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.")
    return body


def ws_id(m: re.Match[str]) -> str:
    """The workspace's ARM id from a route match (canonical ``resourceGroups`` spelling)."""
    return (
        f"/subscriptions/{m['sub']}/resourceGroups/{m['rg']}/providers/{PROVIDER}/"
        f"workspaces/{m['ws']}"
    )


def system_data(created: float, modified: float | None = None) -> dict[str, Any]:
    """The ``systemData`` block every ARM resource carries."""
    return {
        "createdAt": rfc3339(created),
        "createdBy": "stepop-fake",
        "createdByType": "User",
        "lastModifiedAt": rfc3339(modified or created),
        "lastModifiedBy": "stepop-fake",
        "lastModifiedByType": "User",
    }
