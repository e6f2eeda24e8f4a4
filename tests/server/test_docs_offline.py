"""``/docs`` and ``/redoc`` of a real ``memory-sql serve`` load nothing from another host:
every script, style sheet and icon they name is a path of the service itself, and the
service answers each with the file (200, its content type). (That the pages then render the
route list in a browser without a network is the console's browser tests' part.)"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from server.service_process import ServiceProcess


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.links.append(value)


EXPECTED_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png"}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_api_docs_name_only_assets_the_service_serves(
    service: ServiceProcess, page: str
) -> None:
    with service.client() as http:
        answer = http.get(page)
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/html")
        html = answer.text
        parser = _Links()
        parser.feed(html)
        assert parser.links, html
        assert all(link.startswith("/docs/assets/") for link in parser.links), parser.links
        assert not re.search(r"https?://", html), "the page names another host"
        assert "/openapi.json" in html
        for link in parser.links:
            asset = http.get(link)
            assert asset.status_code == 200, link
            kind = EXPECTED_TYPES[link[link.rindex(".") :]]
            assert kind in asset.headers["content-type"], (link, asset.headers["content-type"])
            if link.endswith(".js"):
                assert len(asset.content) > 500_000, link  # the real bundle, not a stub
        assert http.get("/openapi.json").json()["paths"]["/v1/users/{user_id}/facts"]
