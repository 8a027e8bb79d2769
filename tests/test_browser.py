"""The web pages in a real browser (Debian's Chromium, driven by Playwright), with no request leaving the
machine: GraphiQL at /graphql and the memory explorer at /. Screenshots go to test-artifacts/."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support import REPO, Api, ServerProcess, at, require, text_message, uid
from web import frontend

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ARTIFACTS = REPO / "test-artifacts"
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
TIMEOUT_MS = 30_000

pytestmark = pytest.mark.slow


class Offline:
    """Routes every request of a browser context: loopback goes through, anything else is aborted and kept."""

    def __init__(self) -> None:
        self.blocked: list[str] = []
        self.seen: list[str] = []

    async def route(self, route: Any) -> None:
        url = route.request.url
        self.seen.append(url)
        parts = urlsplit(url)
        local = parts.scheme in ("http", "https") and parts.hostname in LOOPBACK
        if local or parts.scheme in ("data", "blob"):
            await route.continue_()
        else:
            self.blocked.append(url)
            await route.abort()


@dataclass
class Tab:
    page: Any
    offline: Offline
    errors: list[str]


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    require(importlib.util.find_spec("playwright") is not None, "the playwright package is not installed")
    require(CHROMIUM.exists(), f"{CHROMIUM} is missing (apt-get install chromium)")
    require(
        frontend.graphiql_page_path().is_file(),
        f"the GraphiQL build is missing ({frontend.graphiql_page_path()}): run web/build.sh",
    )
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest.fixture
async def tab(browser: Any) -> AsyncIterator[Tab]:
    context = await browser.new_context(viewport={"width": 1400, "height": 900})
    offline = Offline()
    await context.route("**/*", offline.route)
    page = await context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # What the pages' Content-Security-Policy refused (Chromium says so on the console only).
    page.on(
        "console",
        lambda message: errors.append(message.text) if "Content Security Policy" in message.text else None,
    )
    try:
        yield Tab(page, offline, errors)
    finally:
        await context.close()
    assert not offline.blocked, f"requests that would have left the machine: {offline.blocked}"
    assert not errors, f"uncaught errors in the page: {errors}"


def artifact(request: pytest.FixtureRequest, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    engine = getattr(request.node, "callspec", None)
    suffix = f"-{engine.params['server']}" if engine and "server" in engine.params else ""
    return ARTIFACTS / f"{name}{suffix}.png"


MESSAGES_QUERY = """
query ($threadId: ID!, $perPage: PerPage, $page: Int, $hideSignals: HideSignalsInput) {
  recall(threadId: $threadId, perPage: $perPage, page: $page, hideSignals: $hideSignals) {
    total page perPage hasMore messages { id }
  }
}"""


async def recall(api: Api, thread: str, **args: Any) -> dict[str, Any]:
    """The same recall through the API, for comparison."""
    return (await api.execute(MESSAGES_QUERY, threadId=thread, **args))["recall"]


async def seed_thread(api: Api, *, title: str) -> tuple[str, str, list[str]]:
    """A thread of 14 messages: text, metadata, two typed signals and a legacy system reminder."""
    resource, thread = uid("res"), uid("thread")
    await api.execute(
        "mutation ($input: CreateThreadInput!) { createThread(input: $input) { id } }",
        input={"id": thread, "resourceId": resource, "title": title, "metadata": {"team": "ops"}},
    )
    messages = []
    for i in range(14):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append(
            text_message(
                thread_id=thread,
                id=f"{thread}-m{i:02d}",
                role=role,
                text=f"Message {i}: " + ("the train to Lyon leaves at 9:04 " * (1 + i % 3)),
                created_at=at(i * 60),
                metadata={"topic": "travel", "n": i} if i % 4 == 0 else None,
            )
        )
    messages[5]["role"] = "signal"
    messages[5]["content"]["parts"] = [{"type": "data-signal", "data": {"type": "reactive", "text": "idle"}}]
    messages[9]["content"]["parts"].insert(0, {"type": "data-signal", "data": {"type": "notification"}})
    reminder = "<system-reminder>Be brief.</system-reminder>"
    messages[12]["content"]["parts"] = [{"type": "text", "text": reminder}]
    await api.execute(
        "mutation ($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }", m=messages
    )
    return resource, thread, [m["id"] for m in messages]


async def replace_text(editor: Any, text: str) -> None:
    """Replaces what a GraphiQL editor holds."""
    await editor.click()
    await editor.page.keyboard.press("ControlOrMeta+A")
    await editor.page.keyboard.press("Delete")
    await editor.page.keyboard.insert_text(text)


async def test_graphiql_works_offline(
    tab: Tab, server: ServerProcess, request: pytest.FixtureRequest
) -> None:
    page = tab.page
    api = Api(server.url)
    _, thread, _ids = await seed_thread(api, title="GraphiQL check")
    expected = await recall(api, thread, perPage=3)

    await page.goto(f"{server.url}/graphql")
    await page.wait_for_selector(".graphiql-container")
    assert await page.title() == "RecallQL · GraphiQL"

    # The docs explorer is open from the start and browses the schema.
    docs = page.locator(".graphiql-doc-explorer")
    await docs.wait_for()
    await docs.get_by_role("link", name="Query").first.click()
    await docs.get_by_text("recall", exact=True).first.wait_for()
    await docs.get_by_role("link", name="recall").first.click()
    await docs.get_by_text("vectorSearchString").first.wait_for()
    # It closes and opens again from the sidebar.
    await page.get_by_role("button", name="Hide Documentation Explorer").click()
    await docs.wait_for(state="hidden")
    await page.get_by_role("button", name="Show Documentation Explorer").click()
    await docs.wait_for()

    # The default tabs are recall examples; the first one runs with its variables edited to our thread.
    tabs = page.locator(".graphiql-tab")
    assert await tabs.count() >= 2
    titles = await tabs.all_inner_texts()
    assert any("NewestPage" in t for t in titles), titles
    variables = page.locator(".graphiql-editor-tool .graphiql-editor").first
    await replace_text(variables, json.dumps({"threadId": thread, "perPage": 3}))
    await page.locator(".graphiql-execute-button").click()
    response = page.locator(".graphiql-response")
    await response.get_by_text(f'"{expected["messages"][-1]["id"]}"').wait_for()
    text = await response.inner_text()
    assert re.search(rf'"total":\s*{expected["total"]},', text), text
    assert re.search(r'"hasMore":\s*true', text), text
    for message in expected["messages"]:
        assert f'"{message["id"]}"' in text, text
    await page.screenshot(path=artifact(request, "graphiql"))

    loaded = [u for u in tab.offline.seen if "/static/build/graphiql/" in u]
    assert any(u.endswith(".js") for u in loaded) and any(u.endswith(".css") for u in loaded), loaded
    assert any(".worker-" in u for u in loaded), f"no Monaco worker was loaded: {loaded}"


async def test_graphiql_runs_subscriptions(
    tab: Tab, server: ServerProcess, request: pytest.FixtureRequest
) -> None:
    # The fetcher had no WebSocket: a subscription ended in "not properly configured for websocket
    # subscriptions", so live updates could not be tried from the page.
    page = tab.page
    api = Api(server.url)
    _, thread, _ids = await seed_thread(api, title="Live updates")
    await page.goto(f"{server.url}/graphql")
    await page.wait_for_selector(".graphiql-container")
    query = f'subscription Live {{ messageSaved(threadId: "{thread}") {{ kind messageId }} }}'
    await replace_text(page.locator(".graphiql-query-editor"), query)
    # Once GraphiQL has read the new operation (it names the tab): before, it sends the old name. The
    # tab in use, named exactly so: an example tab's name may contain "Live" too.
    named = re.compile(r"^\s*Live\s*$")
    await page.locator(".graphiql-tab-active .graphiql-tab-button", has_text=named).wait_for()
    await page.locator(".graphiql-execute-button").click()
    response = page.locator(".graphiql-response")
    # Saved until one is seen: the first may come before the socket has subscribed.
    for attempt in range(40):
        saved = text_message(thread_id=thread, id=uid(f"live{attempt}-"), text="a live one")
        await api.execute(
            "mutation ($m: [MessageInput!]!) { saveMessages(messages: $m) { acknowledged } }", m=[saved]
        )
        text = await response.inner_text()
        if '"SAVED"' in text:
            break
        await asyncio.sleep(0.5)
    assert re.search(r'"kind":\s*"SAVED"', text) and re.search(r'"messageId":\s*"live', text), text
    await page.screenshot(path=artifact(request, "graphiql-subscription"))


async def test_explorer_recall_matches_the_api(
    tab: Tab, server: ServerProcess, request: pytest.FixtureRequest
) -> None:
    page = tab.page
    api = Api(server.url)
    resource, thread, ids = await seed_thread(api, title="Trip planning")

    await page.goto(f"{server.url}/")
    assert await page.title() == "RecallQL · Memory explorer"
    await page.get_by_label("Resource id").fill(resource)
    await page.get_by_label("Resource id").press("Enter")
    # The listing shows each thread's size and newest message (Thread.recall, in the same request).
    item = page.locator(f'#threads button[data-thread-id="{thread}"]')
    newest = await api.execute(
        "query($t: ID!) { recall(threadId: $t, perPage: 1) { total messages { role content { parts {"
        " ... on TextPart { text } } } } } }",
        t=thread,
    )
    [message] = newest["recall"]["messages"]
    preview = " ".join(message["content"]["parts"][0]["text"].split())
    assert await item.locator(".thread-preview").inner_text() == f"{message['role']}: {preview}"
    assert f"{newest['recall']['total']} messages · updated" in await item.inner_text()
    await item.click()
    await page.locator("#thread-title", has_text="Trip planning").wait_for()
    assert f"#resource={resource}&thread={thread}" in page.url

    # The thread view: every message, signals and reminders marked and hidden until asked for.
    items = page.locator("#thread-messages > li")
    await items.nth(13).wait_for(state="attached")
    assert await items.evaluate_all("els => els.map(e => e.dataset.messageId)") == ids
    marked = page.locator("#thread-messages > li.default-hidden")
    assert await marked.count() == 3
    assert not await marked.first.is_visible()
    assert await page.locator("#thread-messages .badge.signal").count() == 2
    assert await page.locator("#thread-messages .badge.reminder").count() == 1
    await page.get_by_label("Show signals and system reminders").check()
    assert await marked.first.is_visible()
    await page.screenshot(path=artifact(request, "explorer-thread"), full_page=True)

    # The Recall tab, reached with the keyboard.
    await page.locator("#tab-messages").focus()
    await page.keyboard.press("ArrowRight")
    assert await page.locator("#tab-recall").get_attribute("aria-selected") == "true"
    form = page.locator("#recall-form")
    await form.get_by_label("perPage", exact=True).fill("5")
    await form.get_by_label("hide all").check()
    await form.get_by_role("button", name="Run recall").click()

    expected = await recall(api, thread, perPage=5, hideSignals={"all": True})
    await check_recall(page, expected)
    assert expected["hasMore"] is True
    status = await page.locator("#recall-status").text_content() or ""
    assert f"total {expected['total']}, page 0, perPage 5, hasMore true" in status, status
    # Signals are filtered after paging (the contract): the page may be short, none of it is a signal.
    assert await page.locator("#recall-messages .badge").count() == 0

    # Next page, through the pager.
    await page.get_by_role("button", name="Next page").click()
    expected_next = await recall(api, thread, perPage=5, page=1, hideSignals={"all": True})
    await check_recall(page, expected_next)
    request_text = await page.locator("#recall-request").text_content() or ""
    assert '"hideSignals": {\n    "all": true\n  }' in request_text, request_text
    await page.screenshot(path=artifact(request, "explorer-recall"), full_page=True)

    # All (perPage false) with every signal kept.
    await form.get_by_label("all (false)").check()
    await form.get_by_label("page", exact=True).fill("")
    await form.get_by_label("hide none").check()
    await form.get_by_role("button", name="Run recall").click()
    everything = await recall(api, thread, perPage=False, hideSignals={"all": False})
    await check_recall(page, everything)
    assert [m["id"] for m in everything["messages"]] == ids

    # Working memory: the section is there, whatever the schema offers.
    assert (await page.locator("#wm-status").inner_text()) != "Pick a resource."


async def check_recall(page: Any, expected: dict[str, Any]) -> None:
    want = [m["id"] for m in expected["messages"]]
    summary = page.locator("#recall-summary")
    await page.wait_for_function(
        """([want, page, total]) => {
            const got = Array.from(document.querySelectorAll('#recall-messages > li[data-message-id]'))
              .map(e => e.dataset.messageId);
            return document.querySelector('#recall-results').getAttribute('aria-busy') === 'false'
              && document.querySelector('#recall-page').dataset.value === String(page)
              && document.querySelector('#recall-total').dataset.value === String(total)
              && JSON.stringify(got) === JSON.stringify(want);
        }""",
        arg=[want, expected["page"], expected["total"]],
    )
    assert await summary.is_visible()
    value = lambda selector: summary.locator(selector).get_attribute("data-value")  # noqa: E731
    assert json.loads(await value("#recall-total")) == expected["total"]
    assert json.loads(await value("#recall-page")) == expected["page"]
    assert json.loads(await value("#recall-per-page")) == expected["perPage"]
    assert json.loads(await value("#recall-has-more")) == expected["hasMore"]
    assert await page.locator("#recall-next").is_disabled() == (not expected["hasMore"])


@dataclass
class Locked:
    """A server that requires authentication, and an admin key for it."""

    server: ServerProcess
    key: str


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[Locked]:
    from web.auth import key_entry, new_key

    key = new_key()
    env = {
        "RECALLQL_AUTH": "required",
        "RECALLQL_API_KEYS": json.dumps([key_entry("ops", key, admin=True)]),
        "RECALLQL_EMBEDDER": "off",
    }
    server = ServerProcess(tmp_path / "data", env)
    try:
        server.wait_ready()
        yield Locked(server, key)
    finally:
        server.stop()


async def test_graphiql_loads_the_schema_once_a_token_is_given(tab: Tab, locked: Locked) -> None:
    """With authentication on, GraphiQL's first schema request has no token (401), and GraphiQL fetched
    it again only on Ctrl+Shift+R: the docs said "Error fetching schema" after the token was typed in.
    A change of the headers now fetches it again."""
    server, key = locked.server, locked.key
    page = tab.page
    await page.goto(f"{server.url}/graphql")
    docs = page.locator(".graphiql-doc-explorer")
    await docs.get_by_text("Error fetching schema").wait_for()
    await page.get_by_role("button", name="Headers").click()
    headers = page.locator(".graphiql-editor-tool .graphiql-editor:visible")
    await replace_text(headers, json.dumps({"Authorization": f"Bearer {key}"}))
    await docs.get_by_role("link", name="Query").first.wait_for()


async def test_explorer_shows_stored_working_memory_once_a_token_is_given(tab: Tab, locked: Locked) -> None:
    """Three faults, one path. A token prompt dismissed left the working-memory section saying "This
    server does not offer working memory yet" for good (the failed introspection was remembered); a
    token pasted as "Bearer …" was refused; and with working memory off in the server's defaults a
    resource's stored working memory read "None"."""
    server, key = locked.server, locked.key
    resource, thread = uid("res"), uid("thread")
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
        for query, variables in [
            (
                "mutation ($i: CreateThreadInput!) { createThread(input: $i) { id } }",
                {"i": {"id": thread, "resourceId": resource}},
            ),
            (
                "mutation ($t: ID!, $r: String, $w: String!, $c: MemoryConfigInput) {"
                " updateWorkingMemory(threadId: $t, resourceId: $r, workingMemory: $w, memoryConfig: $c)"
                " { __typename } }",
                {
                    "t": thread,
                    "r": resource,
                    "w": "# Notes\nlikes tea",
                    "c": {"workingMemory": {"enabled": True, "scope": "RESOURCE"}},
                },
            ),
        ]:
            done = await client.post(f"{server.url}/graphql", json={"query": query, "variables": variables})
            assert "errors" not in done.json(), done.text
    page = tab.page
    answers = ["", f"  Bearer {key} "]  # left empty, then pasted from a header
    page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept(answers.pop(0))))
    await page.goto(f"{server.url}/")
    status = page.locator("#wm-status")
    await page.get_by_label("Resource id").fill(resource)
    await page.get_by_label("Resource id").press("Enter")
    await status.filter(has_text="Could not load the working memory").wait_for()
    await page.get_by_label("Resource id").press("Enter")
    content = page.locator("#wm-content")
    await content.wait_for()
    assert await content.text_content() == "# Notes\nlikes tea"
    assert answers == []


async def test_explorer_loads_more_threads_by_cursor(tab: Tab, server: ServerProcess) -> None:
    """The explorer lists 50 threads, then the next ones: a thread created meanwhile (which would push an
    offset page down by one) neither repeats a thread shown nor hides one."""
    page = tab.page
    api = Api(server.url)
    resource = uid("res")
    create = "mutation ($input: CreateThreadInput!) { createThread(input: $input) { id } }"
    ids = [f"{resource}-{n:02d}" for n in range(55)]
    for n, thread_id in enumerate(ids):
        await api.execute(create, input={"id": thread_id, "resourceId": resource, "createdAt": at(n)})

    await page.goto(f"{server.url}/")
    await page.get_by_label("Resource id").fill(resource)
    await page.get_by_label("Resource id").press("Enter")
    listed = page.locator("#threads button[data-thread-id]")
    await listed.nth(49).wait_for()
    assert await page.locator("#threads-status").inner_text() == "50 of 55 threads"

    await api.execute(create, input={"id": f"{resource}-new", "resourceId": resource, "createdAt": at(99)})
    await page.get_by_role("button", name="Load more threads").click()
    await listed.nth(54).wait_for()
    shown = await listed.evaluate_all("els => els.map(e => e.dataset.threadId)")
    assert shown == ids[::-1]  # newest first, each once, the new one above what was shown
    assert await page.locator("#threads-status").inner_text() == "55 of 55 threads"
    assert await page.get_by_role("button", name="Load more threads").is_hidden()


async def test_explorer_lists_every_resources_threads(tab: Tab, server: ServerProcess) -> None:
    """The All button lists threads without a resource (newest first, each with its resource); a thread
    picked there opens without leaving that listing, and a link to it reopens both."""
    page = tab.page
    api = Api(server.url)
    create = "mutation ($input: CreateThreadInput!) { createThread(input: $input) { id } }"
    # At the last instant the API takes, with ids that sort last: the top of the listing (newest first,
    # ties by id, descending), whatever other tests left on this server.
    made = [(uid("zz-all"), uid("res"), f"9999-12-31T23:59:59.99{n + 8}Z") for n in range(2)]
    for thread_id, resource, created in made:
        await api.execute(create, input={"id": thread_id, "resourceId": resource, "createdAt": created})

    await page.goto(f"{server.url}/")
    await page.get_by_role("button", name="All", exact=True).click()
    listed = page.locator("#threads button[data-thread-id]")
    await listed.nth(1).wait_for()
    top = await listed.evaluate_all("els => els.slice(0, 2).map(e => e.dataset.threadId)")
    assert top == [made[1][0], made[0][0]]
    resources = await page.locator("#threads .thread-resource").evaluate_all(
        "els => els.slice(0, 2).map(e => e.textContent)"
    )
    assert resources == [made[1][1], made[0][1]]
    await listed.nth(1).click()
    await page.locator("#thread-status").filter(has_text="Showing").wait_for()
    assert await page.locator("#resource-id").input_value() == ""  # still every resource's threads
    assert await listed.nth(0).get_attribute("data-thread-id") == made[1][0]
    assert page.url.endswith(f"#all=1&thread={made[0][0]}")
    await page.reload()
    await page.locator("#thread-status").filter(has_text="Showing").wait_for()
    await listed.nth(1).wait_for()
    assert (
        await page.locator("#threads button[aria-current='true']").get_attribute("data-thread-id")
        == made[0][0]
    )


async def thread_of(
    server: ServerProcess, messages: Callable[[str], list[dict[str, Any]]]
) -> tuple[str, str]:
    """A new thread of a new resource holding `messages(thread id)`: (resource, thread)."""
    api = Api(server.url)
    thread, resource = uid("t"), uid("r")
    await api.execute(
        "mutation($i: CreateThreadInput!) { createThread(input: $i) { id } }",
        i={"id": thread, "resourceId": resource},
    )
    await api.execute(
        "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }",
        m=messages(thread),
    )
    return resource, thread


async def test_explorer_shows_all_of_a_thread_with_system_rows(tab: Tab, server: ServerProcess) -> None:
    # total counts system-role rows, which recall never returns: "the newest 2 of 3" was shown under
    # every limit, "all" included, and the third could never be shown.
    page = tab.page
    resource, thread = await thread_of(
        server,
        lambda thread: [
            text_message(
                thread_id=thread, role=role, text=f"{role} {n}", created_at=f"2026-01-01T00:00:0{n}Z"
            )
            for n, role in enumerate(["user", "system", "assistant"])
        ],
    )
    await page.goto(f"{server.url}/#resource={resource}&thread={thread}")
    status = page.locator("#thread-status")
    await status.filter(has_text="Showing").wait_for()
    assert await status.text_content() == (
        "Showing all 2 messages (and 1 system message, which recall never returns); 0 are signals or "
        "system reminders (hidden)."
    )
    assert await page.locator("#thread-messages > li").count() == 2


async def test_explorer_shows_the_content_string_of_a_message_whose_text_is_empty(
    tab: Tab, server: ServerProcess
) -> None:
    # An empty text part hid the legacy content string: the message showed a blank body.
    page = tab.page

    def legacy(thread: str) -> list[dict[str, Any]]:
        message = text_message(thread_id=thread, text="")
        message["content"]["content"] = "legacy content string"
        return [message]

    resource, thread = await thread_of(server, legacy)
    await page.goto(f"{server.url}/#resource={resource}&thread={thread}")
    await page.locator("#thread-status").filter(has_text="Showing").wait_for()
    assert await page.locator("#thread-messages > li .part.text").all_text_contents() == [
        "legacy content string"
    ]


async def test_explorer_back_and_an_edited_hash_follow_the_views(tab: Tab, server: ServerProcess) -> None:
    """Every view replaced the URL's hash in place, so Back left the explorer, and a hash edited by hand
    changed nothing until a reload. Each view is now a history entry, and the hash leads."""
    page = tab.page
    api = Api(server.url)
    resource = uid("res")
    threads = {uid("thread"): title for title in ("Alpha", "Beta", "Gamma")}
    for thread_id, title in threads.items():
        await api.execute(
            "mutation ($input: CreateThreadInput!) { createThread(input: $input) { id } }",
            input={"id": thread_id, "resourceId": resource, "title": title},
        )
    alpha, beta, gamma = threads
    current = page.locator("#threads button[aria-current='true']")

    async def showing(thread_id: str) -> None:
        await page.locator("#thread-title", has_text=threads[thread_id]).wait_for()
        await current.and_(page.locator(f'[data-thread-id="{thread_id}"]')).wait_for()
        assert page.url.endswith(f"#resource={resource}&thread={thread_id}")

    await page.goto(f"{server.url}/")
    await page.get_by_label("Resource id").fill(resource)
    await page.get_by_label("Resource id").press("Enter")
    for thread_id in (alpha, beta):
        await page.locator(f'#threads button[data-thread-id="{thread_id}"]').click()
        await showing(thread_id)
    await page.go_back()
    await showing(alpha)
    await page.go_back()
    await page.wait_for_url(f"**/#resource={resource}")
    await current.wait_for(state="detached")
    await page.go_forward()
    await showing(alpha)
    await page.evaluate(f"location.hash = '#resource={resource}&thread={gamma}'")
    await showing(gamma)


RESOURCE_MESSAGES = """
query ($id: String!, $page: Int!, $direction: SortDirection!) {
  resource(id: $id) {
    messages(page: $page, perPage: 50, orderBy: {direction: $direction}) { total hasMore messages { id } }
  }
}"""


async def test_explorer_lists_a_resources_messages_across_its_threads(
    tab: Tab, server: ServerProcess, request: pytest.FixtureRequest
) -> None:
    """From a loaded resource, its messages across its threads, a page of 50 at a time in either order,
    as Resource.messages answers them (signals hidden unless asked for); each message opens its thread,
    and a link reopens the listing."""
    page = tab.page
    api = Api(server.url)
    resource = uid("res")
    threads = [uid("thread-a"), uid("thread-b")]
    create = "mutation ($input: CreateThreadInput!) { createThread(input: $input) { id } }"
    for thread_id in threads:
        await api.execute(create, input={"id": thread_id, "resourceId": resource})
    messages = [
        text_message(
            thread_id=threads[n % 2], id=f"{resource}-m{n:02d}", text=f"Message {n}", created_at=at(n)
        )
        for n in range(61)
    ]
    messages[55]["role"] = "signal"
    messages[55]["content"]["parts"] = [{"type": "data-signal", "data": {"type": "reactive", "text": "idle"}}]
    await api.execute(
        "mutation ($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }", m=messages
    )

    async def api_page(number: int, direction: str = "DESC") -> list[str]:
        got = await api.execute(RESOURCE_MESSAGES, id=resource, page=number, direction=direction)
        return [m["id"] for m in got["resource"]["messages"]["messages"]]

    listed = page.locator("#resource-message-list > li")
    status = page.locator("#resource-messages-status")

    async def shown() -> list[str]:
        return await listed.evaluate_all("els => els.map(e => e.dataset.messageId)")

    await page.goto(f"{server.url}/")
    await page.get_by_label("Resource id").fill(resource)
    await page.get_by_label("Resource id").press("Enter")
    await page.get_by_role("button", name="Messages across its threads").click()
    await status.filter(has_text="Page 1 of 2, newest first: 50 of 61 messages.").wait_for()
    first = await api_page(0)
    assert await shown() == first and first[0] == f"{resource}-m60"
    assert {await listed.nth(i).locator("button.thread-link code").inner_text() for i in range(2)} == set(
        threads
    )
    assert await page.get_by_role("button", name="Previous page").is_disabled()
    visible = await page.locator("#resource-message-list > li:visible").count()
    assert visible == 49  # the signal is listed but hidden
    await page.get_by_label("Show the resource's signals and system reminders").check()
    assert await page.locator("#resource-message-list > li:visible").count() == 50

    await page.get_by_role("button", name="Next page").click()
    await status.filter(has_text="Page 2 of 2").wait_for()
    assert await shown() == await api_page(1)
    assert await page.get_by_role("button", name="Next page").is_disabled()

    await page.locator("#resource-messages-order").select_option("ASC")
    await status.filter(has_text="Page 1 of 2, oldest first").wait_for()
    assert await shown() == await api_page(0, "ASC")
    assert page.url.endswith(f"#resource={resource}&view=messages")
    await page.screenshot(path=artifact(request, "explorer-resource-messages"))

    await page.reload()
    await status.filter(has_text="Page 1 of 2, newest first").wait_for()
    assert await shown() == first
    await listed.nth(1).locator("button.thread-link").click()
    await page.locator("#thread-status").filter(has_text="Showing").wait_for()
    assert await page.locator("#resource-messages").is_hidden()
    assert page.url.endswith(f"#resource={resource}&thread={threads[1]}")
