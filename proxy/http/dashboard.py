"""`GET /dashboard`: the usage statistics as a page a person reads.

The page is a static shell (HTML, its script, its styles and a small SVG chart module, all in
`proxy/http/static/`, nothing from a CDN). It holds no data: it asks for a token (the admin
token, or a tenant's credential) and draws what the JSON API (`proxy.http.stats_api`) answers
for that token, so it sees exactly what the API lets the token see. The token is kept in the
tab's sessionStorage and sent as `Authorization: Bearer`, never in a cookie or a URL.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

STATIC = Path(__file__).parent / "static"
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
ASSETS = ("dashboard.js", "charts.js", "dashboard.css")
# Everything the page loads comes from here; no inline script or style, no frames, no referrer.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


def _load(name: str) -> tuple[bytes, str]:
    return (STATIC / name).read_bytes(), TYPES[Path(name).suffix]


class Dashboard:
    """The page and its assets, read once (a fixed set of names: no path reaches the disk)."""

    def __init__(self) -> None:
        self.files = {name: _load(name) for name in ("index.html", *ASSETS)}

    def routes(self) -> list[Route]:
        return [
            Route("/dashboard", self.page, methods=["GET", "HEAD"]),
            Route("/dashboard/{name}", self.asset, methods=["GET", "HEAD"]),
        ]

    def _send(self, name: str) -> Response:
        content, media_type = self.files[name]
        return Response(content, media_type=media_type, headers=SECURITY_HEADERS)

    async def page(self, request: Request) -> Response:
        return self._send("index.html")

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ASSETS:
            return JSONResponse(
                {"error": {"message": "Not found.", "type": "invalid_request_error", "code": "not_found"}},
                status_code=404,
                headers=SECURITY_HEADERS,
            )
        return self._send(name)
