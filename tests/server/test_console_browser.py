"""The web console in a real browser (headless Chromium through Selenium) against a real
``memory-sql serve``, on SQLite and PostgreSQL: sign-in, users, editing a fact and its history,
the queue, keys, reports, the request log, tenant isolation and forged cross-site posts.
Every page is saved as a screenshot under ``test-artifacts/console/``. One browser and one
service per backend for the module; each test signs in afresh."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from llm_server import ScriptedLLM, update_reply
from pg_roles import grant_service_role, login_role

from memory_sql import migrations, ops
from memory_sql.database import create_engine
from memory_sql.server.keys import create_key
from memory_sql.storage import SQLStorage
from server.browser import (
    DESKTOP,
    PHONE,
    fetched_elsewhere,
    fits_width,
    follow,
    screenshot,
    start_browser,
)
from server.conftest import service_settings_for
from server.service_process import ServiceProcess

CONVERSATION = [
    {"role": "user", "content": "I write all my services in Python."},
    {"role": "assistant", "content": "Noted: Python it is."},
]


@dataclass
class Site:
    backend: str
    service: ServiceProcess
    llm: ScriptedLLM
    url: str
    admin: str  # acme's admin key
    reader: str  # acme's read key
    beta: str  # beta's admin key

    @property
    def base(self) -> str:
        return self.service.base_url


@pytest.fixture(scope="module")
def browser():
    driver = start_browser()
    yield driver
    driver.quit()


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    """The service on the backend, seeded by the tables' owner; on PostgreSQL it connects as a
    role of its own that row-level security holds, so a page that forgot to act for its
    tenant would show nothing rather than pass."""
    folder = tmp_path_factory.mktemp(f"console-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{folder / 'console.db'}"
        migrations.upgrade(url)
        yield from _site(request.param, folder, url, url)
        return
    made = request.getfixturevalue("new_pg_database")()
    url = made.render_as_string(hide_password=False)
    migrations.upgrade(url)
    with login_role(request.getfixturevalue("pg_server"), made, "memory_console") as role:
        grant_service_role(role, url)
        yield from _site(
            request.param, folder, url, made.set(username=role).render_as_string(False)
        )


def _site(backend: str, folder: Path, url: str, service_url: str) -> Iterator[Site]:
    engine = create_engine(url)
    storage = SQLStorage(engine)
    add_facts(
        storage,
        "alice",
        ("Writes services in Python", "preference", "coder"),
        ("Works on billing at Acme", "context", "coder"),
        ("Lives in Porto", "personal", None),
    )
    ops.add_fact(storage, "Prefers green tea", user_id="bob", tenant_id="acme")
    # erin: one live fact with coder; the unnamed agents' memory holds only a closed one.
    add_facts(storage, "erin", ("Deploys on Fridays", "behavior", "coder"))
    gone = ops.add_fact(storage, "Uses tabs", user_id="erin", tenant_id="acme")
    ops.remove_fact(storage, gone.fact.id, user_id="erin", tenant_id="acme")
    ops.add_fact(storage, "Beta's secret launch plan", user_id="zed", tenant_id="beta")
    keys = [
        create_key(engine, tenant_id=tenant, role=role)[1]
        for tenant, role in (("acme", "admin"), ("acme", "read"), ("beta", "admin"))
    ]
    storage.close()
    engine.dispose()
    with ScriptedLLM() as llm:
        settings = {**service_settings_for(llm), "storage": service_url, "max_attempts": 1}
        service = ServiceProcess(folder, settings)
        try:
            site = Site(backend, service, llm, url, *keys)
            _fail_one_update(site)
            yield site
        finally:
            service.stop()


def add_facts(storage: SQLStorage, user: str, *facts: tuple[str, str, str | None]) -> None:
    """``facts`` (content, category, agent) added to ``user``'s memories in tenant acme."""
    for content, category, agent in facts:
        ops.add_fact(
            storage, content, category=category, user_id=user, agent_name=agent,
            tenant_id="acme",
        )  # fmt: skip


def _fail_one_update(site: Site) -> None:
    """carol's conversation, whose one update attempt fails (the LLM answers 500)."""
    site.llm.reply("the model is down", status=500)
    with site.service.client(site.admin) as http:
        queued = http.post(
            "/v1/conversations",
            json={"user_id": "carol", "thread_id": "t1", "messages": CONVERSATION},
        )
        assert queued.status_code == 202, queued.text
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if http.get("/v1/queue", params={"failed_only": True}).json()["updates"]:
                return
            time.sleep(0.1)
    raise AssertionError("carol's update did not fail")


# Helpers ------------------------------------------------------------------------------------


def by_css(driver, selector: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def all_css(driver, selector: str):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def sign_in(driver, site: Site, key: str, tenant: str = "") -> None:
    driver.delete_all_cookies()
    driver.get(f"{site.base}/console/login")
    by_css(driver, "#api-key").send_keys(key)
    if tenant:
        by_css(driver, "#tenant").send_keys(tenant)
    follow(driver, by_css(driver, "#sign-in"))


def shot(driver, site: Site, name: str) -> Path:
    return screenshot(driver, f"{site.backend}-{name}")


def texts(elements) -> list[str]:
    return [element.text for element in elements]


def wait_for(condition, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


def facts_of(site: Site, user: str, agent: str | None = None, key: str | None = None) -> list:
    with site.service.client(key or site.admin) as http:
        params = {"agent_name": agent} if agent else {}
        response = http.get(f"/v1/users/{user}/facts", params=params)
        return response.json()["facts"] if response.status_code == 200 else []


# Tests --------------------------------------------------------------------------------------


def test_sign_in_and_search_users(browser, site):
    browser.delete_all_cookies()
    browser.get(f"{site.base}/console")
    assert browser.current_url == f"{site.base}/console/login"  # no session: the sign-in page
    shot(browser, site, "login")
    sign_in(browser, site, "msk_0000000000000000_" + "x" * 43)
    assert "unknown or revoked API key" in by_css(browser, ".error").text

    sign_in(browser, site, site.admin)
    assert browser.current_url == f"{site.base}/console/users"
    cookie = browser.get_cookie("memory_sql_console")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert cookie["secure"] is False and cookie["path"] == "/console"  # plain HTTP here
    listed = texts(all_css(browser, "#users a.user"))
    # carol has a memory once her failed update was retried (another test may have run first)
    assert {"alice", "bob", "erin"} <= set(listed) <= {"alice", "bob", "carol", "erin"}  # no zed
    assert fetched_elsewhere(browser, site.base) == []
    shot(browser, site, "users")

    search = by_css(browser, "#user-search")
    search.clear()
    search.send_keys("ALI")
    follow(browser, by_css(browser, "#search"))
    assert texts(all_css(browser, "#users a.user")) == ["alice"]
    row = by_css(browser, "#users tbody tr").text
    assert "coder" in row and "(no agent)" in row and "3" in row
    search = by_css(browser, "#user-search")
    search.clear()
    search.send_keys("nobody")
    follow(browser, by_css(browser, "#search"))
    assert "No user's id contains" in by_css(browser, "#no-users").text

    follow(browser, by_css(browser, "#logout"))
    assert browser.current_url == f"{site.base}/console/login"
    browser.get(f"{site.base}/console/users")
    assert browser.current_url == f"{site.base}/console/login"  # the session is over


def test_edit_a_fact_and_see_its_history(browser, site):
    sign_in(browser, site, site.admin)
    browser.get(f"{site.base}/console/users/alice?agent=coder")
    assert texts(all_css(browser, ".fact-text")) == [
        "Writes services in Python",
        "Works on billing at Acme",
    ]
    assert "Lives in Porto" not in browser.page_source  # the unnamed agents' memory
    shot(browser, site, "memory")
    version = int(by_css(browser, "#version b").text)

    fact = next(f for f in all_css(browser, ".fact") if "Python" in f.text)
    fact_id = fact.get_attribute("data-fact-id")
    fact.find_element("css selector", "summary").click()
    content = fact.find_element("css selector", "textarea[name=content]")
    content.clear()
    content.send_keys("Writes every service in Python 3.12")
    confidence = fact.find_element("css selector", "input[name=confidence]")
    confidence.clear()
    confidence.send_keys("0.75")
    follow(browser, fact.find_element("css selector", "button.save"))
    assert "fact saved: Writes every service in Python 3.12" in by_css(browser, ".notice").text
    assert int(by_css(browser, "#version b").text) == version + 1
    stored = {f["id"]: f for f in facts_of(site, "alice", "coder")}
    assert stored[fact_id]["content"] == "Writes every service in Python 3.12"
    assert stored[fact_id]["confidence"] == 0.75

    # A change made elsewhere since the page was loaded: the save is refused, nothing lost.
    with site.service.client(site.admin) as http:
        changed = http.post(
            "/v1/users/alice/facts", params={"agent_name": "coder"}, json={"content": "Uses vim"}
        )
        assert changed.status_code == 201
    fact = next(f for f in all_css(browser, ".fact") if f.get_attribute("data-fact-id") == fact_id)
    fact.find_element("css selector", "summary").click()
    content = fact.find_element("css selector", "textarea[name=content]")
    content.clear()
    content.send_keys("A stale edit")
    follow(browser, fact.find_element("css selector", "button.save"))
    assert "expected version" in by_css(browser, ".error").text
    stored = {f["id"]: f for f in facts_of(site, "alice", "coder")}
    assert stored[fact_id]["content"] == "Writes every service in Python 3.12"
    assert "Uses vim" in [f["content"] for f in stored.values()]

    # Add a fact and delete it again, from the page as it is now.
    by_css(browser, "details.add summary").click()
    by_css(browser, "#add-fact textarea[name=content]").send_keys("Reviews code on Fridays")
    follow(browser, by_css(browser, "#add-fact button"))
    assert "fact added: Reviews code on Fridays" in by_css(browser, ".notice").text
    added = next(f for f in all_css(browser, ".fact") if "Fridays" in f.text)
    added.find_element("css selector", "summary").click()
    follow(browser, added.find_element("css selector", "button.delete"))
    assert "fact deleted" in by_css(browser, ".notice").text
    assert "Reviews code on Fridays" not in texts(all_css(browser, ".fact-text"))
    assert "Reviews code on Fridays" not in [f["content"] for f in facts_of(site, "alice", "coder")]

    fact = next(f for f in all_css(browser, ".fact") if f.get_attribute("data-fact-id") == fact_id)
    follow(browser, fact.find_element("css selector", "a.history"))
    assert "Writes every service in Python 3.12" in by_css(browser, "#current").text
    events = [
        row.find_elements("css selector", "td") for row in all_css(browser, "#history tbody tr")
    ]
    assert [cells[1].text for cells in events] == ["updated", "added"]
    assert [cells[4].text for cells in events] == ["0.75", "0.90"]
    assert int(events[0][0].text) == version + 1
    # The text before and after each change, under their headings: the edit's old and new
    # text, the text the fact was added with, and nothing of the refused stale edit.
    headings = texts(all_css(browser, "#history thead th"))
    assert {"Before", "After"} <= set(headings)
    rows = all_css(browser, "#history tbody tr")
    before = [row.find_element("css selector", "td.content_before").text for row in rows]
    after = [row.find_element("css selector", "td.content_after").text for row in rows]
    assert before == ["Writes services in Python", ""]
    assert after == ["Writes every service in Python 3.12", "Writes services in Python"]
    for cells, old, new in zip(events, before, after, strict=True):
        assert cells[headings.index("Before")].text == old
        assert cells[headings.index("After")].text == new
    assert "A stale edit" not in by_css(browser, "#history").text
    shot(browser, site, "history")


def test_retry_a_failed_row(browser, site):
    sign_in(browser, site, site.admin)
    browser.get(f"{site.base}/console/queue")
    first = all_css(browser, "#updates .update")[0]
    assert first.get_attribute("data-key") == "turn:acme/carol/-/t1"
    assert "failed" in first.find_element("css selector", ".status").text
    assert "500" in first.find_element("css selector", ".last-error").text
    shot(browser, site, "queue")

    site.llm.reply(json.dumps(update_reply()))
    follow(browser, first.find_element("css selector", "button.retry"))
    assert browser.current_url == f"{site.base}/console/queue"  # 303 after the POST
    assert by_css(browser, ".notice").text == "requeued 1 update"
    browser.refresh()  # a reload neither posts again nor shows the notice again
    assert all_css(browser, ".notice") == []
    learned = wait_for(lambda: facts_of(site, "carol"))
    assert [f["content"] for f in learned] == ["Prefers Python"]
    browser.get(f"{site.base}/console/queue")
    assert "turn:acme/carol/-/t1" not in [
        u.get_attribute("data-key") for u in all_css(browser, "#updates .update")
    ]

    # A read key sees the queue, without the buttons, and cannot post them.
    sign_in(browser, site, site.reader)
    browser.get(f"{site.base}/console/queue")
    assert all_css(browser, "button.retry") == []
    assert all_css(browser, "a[href='/console/keys']") == []
    browser.get(f"{site.base}/console/keys")
    assert "cannot admin" in by_css(browser, "#message").text


def test_create_and_revoke_a_key(browser, site):
    sign_in(browser, site, site.admin)
    browser.get(f"{site.base}/console/keys")
    by_css(browser, "details.add summary").click()
    by_css(browser, "#role option[value=write]").click()
    by_css(browser, "#description").send_keys("ci bot")
    follow(browser, by_css(browser, "#create"))
    if site.backend == "postgresql":
        # The service's role (memory-sql db grant) may read the keys, not make or revoke them.
        assert "may not create or revoke API keys" in by_css(browser, ".error").text
        assert all_css(browser, "#secret") == []
        assert "ci bot" not in by_css(browser, "#keys").text
        row = by_css(browser, f"tr[data-key-id='{site.reader.split('_')[1]}']")
        follow(browser, row.find_element("css selector", "button.revoke"))
        assert "may not create or revoke API keys" in by_css(browser, ".error").text
        with site.service.client(site.reader) as http:
            assert http.get("/v1/users/alice/facts").status_code == 200
        shot(browser, site, "keys")
        return
    secret = by_css(browser, "#secret").get_attribute("value")
    assert re.fullmatch(r"msk_[0-9a-f]{16}_[A-Za-z0-9_-]{43}", secret)
    key_id = secret.split("_")[1]
    shot(browser, site, "keys-created")
    with site.service.client(secret) as http:
        assert http.get("/v1/users/alice/facts").status_code == 200
    browser.get(f"{site.base}/console/keys")
    assert secret not in browser.page_source  # shown once
    row = by_css(browser, f"tr[data-key-id='{key_id}']")
    assert "ci bot" in row.text and "write" in row.text and "live" in row.text

    follow(browser, row.find_element("css selector", "button.revoke"))
    assert f"key {key_id} revoked" in by_css(browser, ".notice").text
    assert "revoked" in by_css(browser, f"tr[data-key-id='{key_id}'] .status").text
    shot(browser, site, "keys")
    with site.service.client(secret) as http:
        assert http.get("/v1/users/alice/facts").status_code == 401


def test_tenant_b_sees_nothing_of_tenant_a(browser, site):
    alice = facts_of(site, "alice", "coder")
    acme_keys = {site.admin, site.reader}
    sign_in(browser, site, site.beta)
    assert "tenant beta" in by_css(browser, "#signed-in").text
    assert texts(all_css(browser, "#users a.user")) == ["zed"]
    for path in (
        "/console/users/alice?agent=coder",
        f"/console/users/alice/facts/{alice[0]['id']}/history?agent=coder",
    ):
        browser.get(f"{site.base}{path}")
        assert "no " in by_css(browser, "#message").text and "Writes" not in browser.page_source
    browser.get(f"{site.base}/console/queue")
    assert "acme" not in by_css(browser, "main").text
    browser.get(f"{site.base}/console/requests")
    assert "acme" not in browser.page_source
    browser.get(f"{site.base}/console/keys")
    shown = {row.get_attribute("data-key-id") for row in all_css(browser, "#keys tbody tr")}
    assert shown and not shown & {key.split("_")[1] for key in acme_keys}

    # Forms of beta's own session, aimed at acme's rows: answered as if they did not exist.
    session = browser.get_cookie("memory_sql_console")["value"]
    csrf = by_css(browser, "input[name=csrf]").get_attribute("value")
    with httpx.Client(base_url=site.base, cookies={"memory_sql_console": session}) as http:
        revoke = http.post(
            f"/console/keys/{site.admin.split('_')[1]}/revoke",
            data={"csrf": csrf},
            headers={"Origin": site.base},
        )
        assert revoke.status_code == 404
        edit = http.post(
            f"/console/users/alice/facts/{alice[0]['id']}",
            data={"csrf": csrf, "version": "1", "content": "x", "category": "context",
                  "confidence": "0.5", "agent": "coder"},
            headers={"Origin": site.base},
        )  # fmt: skip
        assert edit.status_code == 404
        retry = http.post(
            "/console/queue/drop", data={"csrf": csrf, "key": "acme/carol"},
            headers={"Origin": site.base},
        )  # fmt: skip
        assert retry.status_code == 404
    with site.service.client(site.admin) as http:
        assert http.get("/v1/users/alice/facts").status_code == 200  # acme's key still works
    assert facts_of(site, "alice", "coder") == alice


class _AttackerPage:
    """Another origin (its own port) serving a page whose form posts to the console."""

    def __init__(self, html: str) -> None:
        body = html.encode("utf-8")

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_filter_download_and_forget_a_user(browser, site):
    storage = SQLStorage(create_engine(site.url))  # the tables' owner seeds dave
    add_facts(
        storage,
        "dave",
        ("Reviews Go code", "knowledge", "coder"),
        ("Rides a cargo bike", "personal", "coder"),
        ("Likes jazz", "preference", None),
    )
    storage.close()
    storage.engine.dispose()

    sign_in(browser, site, site.reader)
    browser.get(f"{site.base}/console/users/dave?agent=coder&category=personal")
    assert texts(all_css(browser, ".fact-text")) == ["Rides a cargo bike"]
    assert all_css(browser, "#forget") == []  # not an admin
    href = by_css(browser, "#export").get_attribute("href")
    session = browser.get_cookie("memory_sql_console")["value"]
    csrf = by_css(browser, "input[name=csrf]").get_attribute("value")
    with httpx.Client(cookies={"memory_sql_console": session}) as http:
        download = http.get(href)
        assert download.status_code == 200, download.text
        assert download.headers["content-disposition"].startswith("attachment;")
        assert "dave-coder.memory.json" in download.headers["content-disposition"]
        contents = {fact["content"] for fact in download.json()["facts"]}
        assert contents == {"Reviews Go code", "Rides a cargo bike"}
        refused = http.post(
            f"{site.base}/console/users/dave/forget",
            data={"csrf": csrf, "confirm": "dave"},
            headers={"Origin": site.base},
        )
        assert refused.status_code == 403 and "cannot admin" in refused.text
    assert len(facts_of(site, "dave", agent="*")) == 3

    sign_in(browser, site, site.admin)
    browser.get(f"{site.base}/console/users/dave?agent=coder")
    by_css(browser, "details.forget summary").click()
    by_css(browser, "#confirm-forget").send_keys("bob")  # the wrong user
    follow(browser, by_css(browser, "#forget-user"))
    assert "type the user's id (dave)" in by_css(browser, ".error").text
    assert len(facts_of(site, "dave", agent="*")) == 3
    by_css(browser, "details.forget summary").click()
    by_css(browser, "#confirm-forget").send_keys("dave")
    shot(browser, site, "forget")
    follow(browser, by_css(browser, "#forget-user"))
    notice = by_css(browser, ".notice").text
    assert browser.current_url == f"{site.base}/console/users"
    assert notice.startswith("forgot dave: deleted") and "3 memory facts" in notice
    assert "1 memory scope," not in notice and "2 memory scopes" in notice
    assert "dave" not in texts(all_css(browser, "#users a.user"))
    assert "alice" in texts(all_css(browser, "#users a.user"))
    assert facts_of(site, "dave", agent="*") == []
    browser.get(f"{site.base}/console/users/dave")
    assert "no memory of user 'dave'" in browser.page_source


def test_a_forged_cross_site_post_is_refused(browser, site):
    sign_in(browser, site, site.admin)
    browser.get(f"{site.base}/console/users/bob")
    # Even holding the session's real token, a form from another origin is refused.
    csrf = by_css(browser, "input[name=csrf]").get_attribute("value")
    version = by_css(browser, "#version b").text
    attacker = _AttackerPage(
        f"""<!doctype html><form method="post" action="{site.base}/console/users/bob/facts">
        <input name="csrf" value="{csrf}"><input name="version" value="{version}">
        <input name="content" value="Forged fact"><button id="go">Win a prize</button></form>"""
    )
    try:
        browser.get(attacker.url)
        follow(browser, by_css(browser, "#go"))
        wait_for(lambda: browser.current_url.startswith(site.base))
        assert "not sent from the console's own pages" in by_css(browser, "#message").text
    finally:
        attacker.close()
    assert "Forged fact" not in [f["content"] for f in facts_of(site, "bob")]

    session = browser.get_cookie("memory_sql_console")["value"]
    form = {"version": version, "content": "Forged fact"}
    own = {"Origin": site.base}
    with httpx.Client(base_url=site.base, cookies={"memory_sql_console": session}) as http:
        for data, headers in (
            (form, own),  # no token
            ({**form, "csrf": "guessed"}, own),  # a wrong one
            ({**form, "csrf": csrf}, {"Origin": "http://evil.example"}),
            ({**form, "csrf": csrf}, {"Referer": "http://evil.example/page"}),
            ({**form, "csrf": csrf}, {"Origin": "null"}),
        ):
            refused = http.post("/console/users/bob/facts", data=data, headers=headers)
            assert refused.status_code == 403, (data, headers)
        assert "Forged fact" not in [f["content"] for f in facts_of(site, "bob")]
        done = http.post(
            "/console/users/bob/facts", data={**form, "csrf": csrf, "content": "Real fact"},
            headers=own,
        )  # fmt: skip
        assert done.status_code == 303 and done.headers["location"] == "/console/users/bob?agent="
        assert "fact added: Real fact" in http.get(done.headers["location"]).text
        # The sign-in form is protected the same way, before there is a session.
        login = http.post("/console/login", data={"api_key": site.admin}, headers=own)
        assert login.status_code == 403
        page = http.get("/console/login", headers={"X-Forwarded-Proto": "https"})
        cookie = page.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Secure" in cookie
        headers = page.headers
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert "script-src" not in headers["content-security-policy"]  # default-src 'none'
    assert "Real fact" in [f["content"] for f in facts_of(site, "bob")]


def test_reports_and_the_request_log(browser, site):
    sign_in(browser, site, site.admin)
    browser.get(f"{site.base}/console/reports")
    categories = by_css(browser, "#chart-categories svg desc").get_attribute("textContent")
    assert "preference:" in categories and "context:" in categories
    assert "beta" not in browser.page_source.lower()  # tenant beta's fact is not counted
    calls = by_css(browser, "#chart-calls svg desc").get_attribute("textContent")
    assert re.search(r"failed: [1-9]", calls)  # carol's failed call
    totals = by_css(browser, "#totals").text
    assert "memories" in totals and re.search(r"\b[1-9]\d* LLM calls?\b", totals)
    assert not re.search(r"(^|\n)1 LLM calls", totals)  # one call, said so
    assert fetched_elsewhere(browser, site.base) == []
    shot(browser, site, "reports")

    browser.get(f"{site.base}/console/requests")
    rows = all_css(browser, "#requests tbody tr")
    routes = [row.find_elements("css selector", "td")[2].text for row in rows]
    assert "/console/reports" in routes and "/v1/conversations" in routes
    statuses = {row.find_elements("css selector", "td")[3].text for row in rows}
    assert "200" in statuses
    assert "I write all my services" not in browser.page_source  # no bodies
    shot(browser, site, "requests")


@pytest.mark.parametrize("size", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_pages_fit_the_screen(browser, site, size):
    sign_in(browser, site, site.admin)
    browser.set_window_size(*size)
    try:
        alice = facts_of(site, "alice", "coder")[0]["id"]
        for name, path in (
            ("users", "/console/users"),
            ("agents", "/console/users/alice"),
            ("memory", "/console/users/alice?agent=coder"),
            ("history", f"/console/users/alice/facts/{alice}/history?agent=coder"),
            ("queue", "/console/queue"),
            ("reports", "/console/reports"),
            ("reports-year", "/console/reports?days=365"),
            ("keys", "/console/keys"),
            ("requests", "/console/requests"),
            ("not-found", "/console/no/such/page"),
        ):
            browser.get(f"{site.base}{path}")
            assert browser.current_url.startswith(f"{site.base}/console/"), path
            assert fits_width(browser), f"{path} scrolls sideways at {size}"
            shot(browser, site, f"{'phone' if size == PHONE else 'desktop'}-{name}")
        browser.delete_all_cookies()
        browser.get(f"{site.base}/console/login")
        assert fits_width(browser), f"the sign-in page scrolls sideways at {size}"
    finally:
        browser.set_window_size(*DESKTOP)


# The first hour (issue 34) ------------------------------------------------------------------


def test_clicking_a_user_opens_their_real_memory(browser, site):
    sign_in(browser, site, site.admin)
    row = next(r for r in all_css(browser, "#users tbody tr") if r.text.startswith("erin"))
    # erin's removed fact is a closed version: not counted.
    assert row.find_element("css selector", "td.num").text == "1"
    follow(browser, row.find_element("css selector", "a.user"))
    # erin's only memory with facts is coder's: it opens, not the unnamed agents' empty one.
    assert browser.current_url == f"{site.base}/console/users/erin?agent=coder"
    assert texts(all_css(browser, ".fact-text")) == ["Deploys on Fridays"]
    assert by_css(browser, ".tabs a[aria-current=page]").text == "coder"

    # alice has facts with two agents: a page lists them, each with its facts.
    browser.get(f"{site.base}/console/users")
    follow(browser, next(a for a in all_css(browser, "#users a.user") if a.text == "alice"))
    assert browser.current_url == f"{site.base}/console/users/alice"
    rows = [r.find_elements("css selector", "td") for r in all_css(browser, "#agents tbody tr")]
    listed = {name.text: int(facts.text) for name, facts in rows}
    assert set(listed) == {"coder", "(no agent)"} and listed["(no agent)"] == 1
    assert listed["coder"] == len(facts_of(site, "alice", "coder"))
    shot(browser, site, "agents")
    follow(browser, next(a for a in all_css(browser, "#agents a.agent") if a.text == "coder"))
    assert browser.current_url == f"{site.base}/console/users/alice?agent=coder"

    # bob has one memory, the unnamed agents': it opens.
    browser.get(f"{site.base}/console/users/bob")
    assert browser.current_url == f"{site.base}/console/users/bob?agent="
    assert "Prefers green tea" in texts(all_css(browser, ".fact-text"))


def test_a_search_counts_what_it_shows(browser, site):
    sign_in(browser, site, site.admin)
    browser.get(f"{site.base}/console/users/alice?agent=coder")
    total = len(all_css(browser, ".fact"))
    assert by_css(browser, "#fact-count").text == f"({total})"
    search = by_css(browser, "#fact-search")
    search.send_keys("billing")
    follow(browser, by_css(browser, "#filter"))
    assert texts(all_css(browser, ".fact-text")) == ["Works on billing at Acme"]
    assert by_css(browser, "#fact-count").text == f"(1 of {total})"
    shot(browser, site, "memory-search")


def test_times_read_as_dates_with_the_full_time_on_hover(browser, site):
    sign_in(browser, site, site.admin)
    for path in ("/console/users", "/console/requests", "/console/keys", "/console/queue"):
        browser.get(f"{site.base}{path}")
        shown = all_css(browser, "main time")
        assert shown or all_css(browser, "#no-updates"), path
        for moment in shown:
            assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", moment.text), moment.text
            title = moment.get_attribute("title")
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", title), title
            assert title.replace("T", " ").startswith(moment.text.removesuffix(" UTC"))
    assert "attempt(s)" not in browser.page_source and "update(s)" not in browser.page_source


def test_the_request_log_fits_without_cutting_the_request_id(browser, site):
    sign_in(browser, site, site.admin)
    browser.get(f"{site.base}/console/requests")
    box = by_css(browser, "#requests").find_element("xpath", "..")
    assert browser.execute_script(
        "return arguments[0].scrollWidth <= arguments[0].clientWidth", box
    )
    ids = all_css(browser, "#requests td.request-id code")
    assert ids and all(re.fullmatch(r"[0-9a-f]{32}|[\w.:-]{1,64}", i.text) for i in ids)
    right = browser.execute_script("return arguments[0].getBoundingClientRect().right", box)
    for element in ids[:5]:
        edge = browser.execute_script("return arguments[0].getBoundingClientRect().right", element)
        assert edge <= right, (edge, right)
    shot(browser, site, "requests-desktop")


def test_failures_are_console_pages_titled_for_what_failed(browser, site):
    sign_in(browser, site, site.admin)
    browser.get(f"{site.base}/console/no/such/page")
    assert browser.title == "Page not found · memory_sql console"
    assert by_css(browser, "#failure").text == "Page not found"
    assert "/console/no/such/page" in by_css(browser, "#message").text
    assert all_css(browser, "nav a[href='/console/users']")  # the console's own page
    assert '{"detail"' not in browser.page_source and '{"error"' not in browser.page_source
    with httpx.Client(base_url=site.base) as http:
        page = http.get("/console/nope")
        assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
        assert http.get("/console/static/console.css").status_code == 200
    shot(browser, site, "not-found")
    browser.get(f"{site.base}/console/users/nobody")
    assert browser.title == "No such user · memory_sql console"
    sign_in(browser, site, site.reader)
    browser.get(f"{site.base}/console/keys")
    assert browser.title == "Not allowed · memory_sql console"
    assert "Not done" not in browser.page_source


def _fills(browser) -> dict[str, set[str]]:
    """Each series' colour on the reports page: {colour: the series names drawn in it}."""
    found: dict[str, set[str]] = {}
    for rect in all_css(browser, ".charts svg rect"):
        name = (rect.get_attribute("class") or "").split()[0].removeprefix("series-")
        fill = browser.execute_script("return getComputedStyle(arguments[0]).fill", rect)
        found.setdefault(fill, set()).add(name)
    return found


def test_reports_use_one_colour_per_meaning_and_label_the_days(browser, site):
    sign_in(browser, site, site.admin)
    browser.get(f"{site.base}/console/reports?days=30")
    fills = _fills(browser)
    assert {"failed", "completion"} <= set().union(*fills.values())
    for fill, names in fills.items():
        assert len(names) == 1, (fill, names)  # never two meanings in one colour
    for chart in ("activity", "calls", "tokens"):
        days = texts(all_css(browser, f"#chart-{chart} text.day"))
        assert 5 <= len(days) <= 7 and len(set(days)) == len(days), days
        assert all(re.fullmatch(r"\d{4}-\d\d-\d\d", day) for day in days)
        spans = [
            browser.execute_script(
                "const r = arguments[0].getBoundingClientRect(); return [r.left, r.right]", label
            )
            for label in all_css(browser, f"#chart-{chart} text.day")
        ]
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), (
            spans
        )  # none overlaps
    select = by_css(browser, "#days").rect
    button = by_css(browser, "#show").rect
    assert 0 <= button["x"] - (select["x"] + select["width"]) < 24, (select, button)
    assert abs(button["y"] - select["y"]) < 12

    # beta has no LLM call: the tokens chart's axis reads 0, not a made-up 1.
    sign_in(browser, site, site.beta)
    browser.get(f"{site.base}/console/reports")
    assert texts(all_css(browser, "#chart-tokens text.tick")) == ["0"]
    assert "1 memory" in by_css(browser, "#totals").text
    assert "1 memories" not in by_css(browser, "#totals").text
    shot(browser, site, "reports-beta")
