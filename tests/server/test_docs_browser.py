"""The API's docs in a real headless Chromium with no network but this machine: Swagger UI at
``/docs`` and ReDoc at ``/redoc`` render the route list from the service's own assets."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from llm_server import ScriptedLLM

from memory_sql import migrations
from server.browser import fetched_elsewhere, screenshot, start_browser
from server.conftest import service_settings_for
from server.service_process import ServiceProcess


@pytest.fixture(scope="module")
def docs_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, str]]:
    driver = start_browser()
    folder = tmp_path_factory.mktemp("docs")
    url = f"sqlite:///{folder / 'docs.db'}"
    migrations.upgrade(url)
    try:
        with ScriptedLLM() as llm:
            service = ServiceProcess(folder, {**service_settings_for(llm), "storage": url})
            try:
                yield driver, service.base_url
            finally:
                service.stop()
    finally:
        driver.quit()


def _texts(driver, selector: str, wanted: str, seconds: float = 30.0) -> list[str]:
    """The texts of the elements matching ``selector`` once one of them holds ``wanted``."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + seconds
    texts: list[str] = []
    while time.monotonic() < deadline:
        texts = [e.text for e in driver.find_elements(By.CSS_SELECTOR, selector)]
        if any(wanted in text for text in texts):
            return texts
        time.sleep(0.2)
    return texts


def test_swagger_ui_lists_the_routes_with_no_network(docs_site) -> None:
    driver, base = docs_site
    driver.get(f"{base}/docs")
    paths = _texts(driver, ".opblock-summary-path", "/v1/conversations")
    screenshot(driver, "docs-swagger")
    assert "/v1/conversations" in " ".join(paths)
    assert any("/v1/users/{user_id}/facts" in path for path in paths), paths
    assert fetched_elsewhere(driver, base) == []


def test_redoc_lists_the_routes_with_no_network(docs_site) -> None:
    driver, base = docs_site
    driver.get(f"{base}/redoc")
    body = _texts(driver, "body", "Queue a finished conversation")
    screenshot(driver, "docs-redoc")
    assert any("Queue a finished conversation" in text for text in body)
    # ReDoc's bundle names its own logo on a CDN: with no network it fails to load, and the
    # page renders all the same. Nothing else may come from elsewhere.
    elsewhere = [name for name in fetched_elsewhere(driver, base) if "cdn.redoc.ly" not in name]
    assert elsewhere == []
