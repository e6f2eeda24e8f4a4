"""A real headless Chromium for the browser tests, driven by Selenium through Debian's
``chromium`` and ``chromium-driver`` (``.ci/run`` installs them). Without them a test skips,
except under CI=true, where it fails. Screenshots go to ``test-artifacts/console/``."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
DESKTOP = (1280, 800)
PHONE = (390, 844)


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    for name in ("chromium", "chromedriver"):
        if shutil.which(name) is None:
            return f"{name} is not installed (apt-get install chromium chromium-driver)"
    return None


def start_browser():  # -> selenium.webdriver.Chrome
    """A headless Chromium at 1280×800; skips (fails under CI=true) without one."""
    missing = _missing()
    if missing is not None:
        if IN_CI:
            pytest.fail(missing)
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in (
        "--headless=new",
        "--no-sandbox",  # tests may run as root in a container
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-proxy-server",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        # No network but this machine: any other host name fails to resolve.
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
        f"--window-size={DESKTOP[0]},{DESKTOP[1]}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    driver.set_page_load_timeout(30)
    driver.set_window_size(*DESKTOP)
    return driver


def screenshot(driver, name: str) -> Path:
    """Save the page as ``test-artifacts/console/<name>.png`` (the whole page's height)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    width = driver.get_window_size()["width"]
    height = driver.execute_script("return document.documentElement.scrollHeight")
    original = driver.get_window_size()["height"]
    driver.set_window_size(width, max(original, min(int(height) + 120, 4000)))
    try:
        driver.save_screenshot(str(path))
    finally:
        driver.set_window_size(width, original)
    return path


def fits_width(driver) -> bool:
    """Whether the page needs no sideways scrolling at the window's width (wide tables
    scroll inside their own box)."""
    return driver.execute_script(
        "return document.documentElement.scrollWidth <= window.innerWidth + 1"
    )


def fetched_elsewhere(driver, base_url: str) -> list[str]:
    """Every resource the page loaded from anywhere but ``base_url``."""
    names = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    return [name for name in names if not name.startswith(base_url)]


def follow(driver, element, timeout: float = 20.0) -> None:
    """Click ``element`` (a link or a submit button) and wait until the next page replaced
    this one and has loaded (a click returns before the navigation it starts has finished)."""
    driver.execute_script("window.__leaving = true")
    element.click()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if driver.execute_script(
                "return !window.__leaving && document.readyState === 'complete'"
            ):
                return
        except Exception:  # the page went away between two looks: look again
            pass
        time.sleep(0.05)
    raise AssertionError(f"no new page within {timeout} s of the click (at {driver.current_url})")
