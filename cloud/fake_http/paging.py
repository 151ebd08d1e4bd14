"""The page size of a fake's job list, settable through ``/_fake/page_size``.

The services cap a list page (Vertex AI: 1000 jobs whatever ``pageSize`` asks; Azure ML: 100);
a test lowers the cap so that a few jobs span several pages, and a reset restores it.
"""

from __future__ import annotations

from cloud.fake_http.routing import Request, Response


class PageSize:
    """The most jobs one list page holds (``cap``): the service's own (``limit``) until set."""

    path = "/_fake/page_size"

    def __init__(self, limit: int) -> None:
        self.limit = int(limit)
        self.cap = self.limit

    def control(self, req: Request) -> Response:
        """``GET|POST /_fake/page_size`` (``{"size": n}``): the cap in force, after setting it."""
        if req.method == "POST":
            try:
                size = int((req.json() or {}).get("size"))
            except (TypeError, ValueError):
                size = 0
            if size < 1:
                return Response(400, {"error": 'page_size: give {"size": n} with n >= 1'})
            self.cap = size
        return Response(200, {"size": self.cap})

    def reset(self) -> None:
        self.cap = self.limit
