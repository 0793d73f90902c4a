"""The dashboard's files: served from a fixed set (no path reaches the disk), with a strict
content security policy; the page's script writes client strings as text only."""

from __future__ import annotations

import re

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from proxy.http.dashboard import ASSETS, STATIC, Dashboard


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(Starlette(routes=Dashboard().routes()))


def test_the_page_and_its_assets_are_served_with_a_strict_policy(client):
    page = client.get("/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe" not in policy and "frame-ancestors 'none'" in policy
    assert page.headers["x-content-type-options"] == "nosniff" and page.headers["referrer-policy"] == "no-referrer"
    for name in ASSETS:
        r = client.get(f"/dashboard/{name}")
        assert r.status_code == 200 and r.content == (STATIC / name).read_bytes()
        assert r.headers["content-type"].startswith("text/css" if name.endswith(".css") else "text/javascript")
    assert client.head("/dashboard").status_code == 200


def test_everything_the_page_loads_is_served_from_here(client):
    html = client.get("/dashboard").text
    loaded = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert loaded and all(url == "data:," or url.removeprefix("/dashboard/") in ASSETS for url in loaded)
    assert "<script>" not in html and " style=" not in html  # nothing inline: the policy forbids it


@pytest.mark.parametrize(
    "path",
    [
        "/dashboard/index.html",
        "/dashboard/..%2fdashboard.py",
        "/dashboard/%2e%2e",
        "/dashboard/dashboard.js.map",
        "/dashboard/DASHBOARD.JS",
    ],
)
def test_other_names_are_not_found(client, path):
    r = client.get(path)
    assert r.status_code == 404
    assert r.headers.get("content-type", "").startswith("application/json") or r.text == "Not Found"
    assert "import" not in r.text  # never a file's source


def test_the_scripts_never_write_html_or_evaluate_strings():
    for name in ("dashboard.js", "charts.js"):
        source = (STATIC / name).read_text()
        for unsafe in (
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            'setAttribute("style"',
            "localStorage",
        ):
            assert unsafe not in source, (name, unsafe)
