"""Title generation (mastra-behaviour.md §6.9): the heuristic, and a real local chat endpoint stub."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from models.records import MessageRecord
from resolvers.errors import BadUserInput
from resolvers.titles import (
    DEFAULT_TITLE_INSTRUCTIONS,
    FALLBACK_TITLE,
    TitleOptions,
    clean_title,
    heuristic_title,
    title_options,
    transcript,
)
from tests.support import Api, ServerProcess, at, database, engines, running_server, text_message, uid

CREATE = "mutation($i: CreateThreadInput!) { createThread(input: $i) { id createdAt } }"
SAVE = """mutation($m: [MessageInput!]!, $c: MemoryConfigInput) {
  saveMessages(messages: $m, memoryConfig: $c) { messages { id } } }"""
THREAD = "query($id: ID!) { thread(id: $id) { title metadata createdAt updatedAt } }"
ON = {"generateTitle": {"enabled": True}}


def _message(role: str, *parts: dict[str, Any], content: str | None = None) -> MessageRecord:
    body: dict[str, Any] = {"format": 2, "parts": list(parts)}
    if content is not None:
        body["content"] = content
    return MessageRecord(
        id=uid("m"), thread_id="t", resource_id="r", role=role, type="v2", created_at=0, content=body
    )


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


# ---------------------------------------------------------------------------------------------- units
def test_title_options() -> None:
    assert title_options({"generateTitle": False}) is None
    assert title_options({"generateTitle": True}) == TitleOptions()
    assert title_options({"generateTitle": {"model": "m", "minMessages": 2}}) == TitleOptions("m", None, 2)
    # threads.generateTitle (the documented place) is accepted and wins when given.
    assert title_options({"generateTitle": True, "threads": {"generateTitle": False}}) is None
    assert title_options({"threads": {"generateTitle": {"instructions": "x"}}}) == TitleOptions(None, "x", 1)
    for bad in ({"minMessages": 0}, {"model": ""}, {"instructions": 3}):
        with pytest.raises(BadUserInput):
            title_options({"generateTitle": bad})
    with pytest.raises(BadUserInput):
        title_options({"generateTitle": "yes"})


def test_clean_title_strips_thinking_and_whitespace() -> None:
    assert clean_title("  <think>hmm</think> Generated Title  ") == "Generated Title"
    assert clean_title("<think>a\nb</think>\n<think>c</think>Title") == "Title"
    assert clean_title("bad\x00 title\ud800!\U0001f600") == "bad title!\U0001f600"


def test_transcript_is_mastras() -> None:
    messages = [
        _message("user", _text("Hello there, tell me about apples")),
        _message(
            "assistant",
            {"type": "reasoning", "reasoning": "think"},
            {
                "type": "tool-invocation",
                "toolInvocation": {"state": "call", "toolName": "t", "args": {"q": 1}},
            },
            {
                "type": "tool-invocation",
                "toolInvocation": {"state": "result", "toolName": "t", "result": "ok"},
            },
            _text("assistant reply"),
        ),
        _message("user", content="plain content"),
    ]
    assert transcript(messages) == (
        "User: Hello there, tell me about apples\n"
        "Reasoning: think\n"
        'Tool Call t: {"q":1}\n'
        "Tool Result t: ok\n"
        "Assistant: assistant reply\n"
        "User: plain content"
    )


def test_heuristic_title() -> None:
    assert heuristic_title([_message("user", _text("Find me a train to Lyon"))]) == "Find me a train to Lyon"
    assert (
        heuristic_title([_message("user", _text('\n\n## Re: "urgent": fix it\nmore'))]) == "Re urgent fix it"
    )
    long = "word " * 40
    title = heuristic_title([_message("user", _text(long))])
    assert len(title) <= 80 and title.endswith("word") and title.startswith("word word")
    assert len(heuristic_title([_message("user", _text("x" * 200))])) == 80
    # Never half a character drawn from several code points.
    family, accented = "\U0001f469\u200d\U0001f469\u200d\U0001f467", "e\u0301"
    assert heuristic_title([_message("user", _text("a" * 79 + family + "b"))]) == "a" * 79
    assert heuristic_title([_message("user", _text("a" * 75 + family + "b"))]) == "a" * 75 + family
    assert heuristic_title([_message("user", _text("a" * 79 + accented + "b"))]) == "a" * 79
    assert (
        heuristic_title([_message("assistant", _text("hi")), _message("user", _text(" "))]) == FALLBACK_TITLE
    )
    assert heuristic_title([_message("assistant", _text("a")), _message("user", _text("b"))]) == "b"


# ------------------------------------------------------------------------------- heuristic, over HTTP
async def wait_for_title(api: Api, thread_id: str, timeout: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        thread = (await api.execute(THREAD, id=thread_id))["thread"]
        if thread["title"]:
            return thread
        await asyncio.sleep(0.05)
    raise AssertionError(f"thread {thread_id} got no title")


async def settle(api: Api, thread_id: str, wait: float = 0.5) -> dict[str, Any]:
    await asyncio.sleep(wait)
    return (await api.execute(THREAD, id=thread_id))["thread"]


async def test_heuristic_title_after_the_first_user_message(api: Api) -> None:
    thread_id, resource_id = uid("t"), uid("r")
    created = (
        await api.execute(CREATE, i={"id": thread_id, "resourceId": resource_id, "metadata": {"keep": 1}})
    )["createThread"]
    await api.execute(
        SAVE, m=[text_message(thread_id=thread_id, text="Plan: a 'trip' to Lyon\nin May")], c=ON
    )
    thread = await wait_for_title(api, thread_id)
    assert thread["title"] == "Plan a trip to Lyon"
    assert thread["createdAt"] == created["createdAt"] and thread["metadata"] == {"keep": 1}
    # Later saves never re-title it.
    await api.execute(SAVE, m=[text_message(thread_id=thread_id, text="Something else")], c=ON)
    assert (await settle(api, thread_id))["title"] == "Plan a trip to Lyon"


async def test_no_title_when_off_titled_or_without_a_user_message(api: Api) -> None:
    off, titled, assistant_only = uid("t"), uid("t"), uid("t")
    resource_id = uid("r")
    for thread_id, title in ((off, ""), (titled, "Kept"), (assistant_only, "")):
        await api.execute(CREATE, i={"id": thread_id, "resourceId": resource_id, "title": title})
    await api.execute(SAVE, m=[text_message(thread_id=off, text="hello")])  # server default: off
    await api.execute(SAVE, m=[text_message(thread_id=titled, text="hello")], c=ON)
    await api.execute(SAVE, m=[text_message(thread_id=assistant_only, role="assistant", text="hi")], c=ON)
    for thread_id, title in ((off, ""), (titled, "Kept"), (assistant_only, "")):
        assert (await settle(api, thread_id, 0.3))["title"] == title


async def test_a_title_comes_only_from_the_owners_messages(api: Api) -> None:
    """A message another resource saved into the thread (an admin credential can) never becomes its
    title: the owner would read another resource's text in it, and so would the TITLE_GENERATED event."""
    thread_id, owner, stranger = uid("t"), uid("r"), uid("r")
    await api.execute(CREATE, i={"id": thread_id, "resourceId": owner})
    secret = text_message(thread_id=thread_id, resource_id=stranger, text="Stranger secret plan")
    await api.execute(SAVE, m=[secret], c=ON)
    assert (await settle(api, thread_id))["title"] == ""
    await api.execute(SAVE, m=[text_message(thread_id=thread_id, text="Owner question")], c=ON)
    assert (await wait_for_title(api, thread_id))["title"] == "Owner question"


async def test_min_messages_and_the_threads_alias(api: Api) -> None:
    thread_id, resource_id = uid("t"), uid("r")
    await api.execute(CREATE, i={"id": thread_id, "resourceId": resource_id})
    config = {"threads": {"generateTitle": {"options": {"minMessages": 2}}}}
    await api.execute(SAVE, m=[text_message(thread_id=thread_id, text="first question")], c=config)
    assert (await settle(api, thread_id))["title"] == ""
    await api.execute(SAVE, m=[text_message(thread_id=thread_id, role="assistant", text="answer")], c=config)
    assert (await wait_for_title(api, thread_id))["title"] == "first question"


async def test_bad_title_options_are_rejected_before_writing(api: Api) -> None:
    thread_id, resource_id = uid("t"), uid("r")
    await api.execute(CREATE, i={"id": thread_id, "resourceId": resource_id})
    errors = await api.errors(
        SAVE, m=[text_message(thread_id=thread_id)], c={"generateTitle": {"options": {"minMessages": 0}}}
    )
    assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert errors[0]["message"] == "generateTitle.minMessages must be a positive integer."
    q = "query($t: ID!) { recall(threadId: $t) { total } }"
    assert (await api.execute(q, t=thread_id))["recall"]["total"] == 0


# -------------------------------------------------------------------------------- chat endpoint stub
class ChatStub:
    """An OpenAI-compatible chat completions endpoint on a free loopback port, in a thread."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.replies: dict[str, tuple[int, str, float]] = {}  # marker in the transcript -> reply
        self.default: tuple[int, str, float] = (200, "Stub Title", 0.0)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                stub.requests.append({"path": self.path, "auth": self.headers.get("authorization"), **body})
                transcript = body["messages"][-1]["content"]
                status, text, delay = next(
                    (reply for marker, reply in stub.replies.items() if marker in transcript), stub.default
                )
                time.sleep(delay)
                payload = (
                    {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
                    if status == 200
                    else {"error": {"message": text}}
                )
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def for_thread(self, thread_id: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if thread_id in r["messages"][-1]["content"]]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def chat_stub() -> Iterator[ChatStub]:
    stub = ChatStub()
    yield stub
    stub.close()


@pytest.fixture(scope="module", params=engines())
async def chat_server(
    request: pytest.FixtureRequest, chat_stub: ChatStub, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ServerProcess]:
    tmp: Path = tmp_path_factory.mktemp(f"titles-{request.param}")
    async with database(request.param, tmp) as url:
        env = {
            "RECALLQL_DATABASE_URL": url,
            "RECALLQL_CHAT_URL": chat_stub.url,
            "RECALLQL_CHAT_MODEL": "stub-model",
            "RECALLQL_CHAT_API_KEY": "secret",
            "RECALLQL_CHAT_TIMEOUT": "5",
        }
        with running_server(tmp / "data", env) as server:
            yield server


async def _untitled(api: Api) -> str:
    thread_id = uid("t")
    await api.execute(CREATE, i={"id": thread_id, "resourceId": uid("r")})
    return thread_id


async def test_titles_from_the_chat_endpoint(chat_server: ServerProcess, chat_stub: ChatStub) -> None:
    api = Api(chat_server.url)
    thread_id = await _untitled(api)
    chat_stub.replies[thread_id] = (200, "  <think>hmm</think> Generated Title  ", 0.0)
    await api.execute(
        SAVE,
        m=[
            text_message(
                thread_id=thread_id, text=f"Hello there, tell me about apples ({thread_id})", created_at=at(1)
            ),
            text_message(thread_id=thread_id, role="assistant", text="assistant reply", created_at=at(2)),
        ],
        c=ON,
    )
    assert (await wait_for_title(api, thread_id))["title"] == "Generated Title"
    [sent] = chat_stub.for_thread(thread_id)
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer secret"
    assert sent["model"] == "stub-model"
    assert sent["messages"] == [
        {"role": "system", "content": DEFAULT_TITLE_INSTRUCTIONS},
        {
            "role": "user",
            "content": f"User: Hello there, tell me about apples ({thread_id})\nAssistant: assistant reply",
        },
    ]


async def test_a_model_title_keeps_only_what_every_database_stores(
    chat_server: ServerProcess, chat_stub: ChatStub
) -> None:
    """A model's answer holding U+0000 failed every attempt to store the title on PostgreSQL (a logged
    traceback on each save), and on SQLite gave an export its own import refuses."""
    api = Api(chat_server.url)
    thread_id = await _untitled(api)
    chat_stub.replies[thread_id] = (200, "Apples\u0000 and pears", 0.0)
    await api.execute(
        SAVE, m=[text_message(thread_id=thread_id, text=f"tell me about apples ({thread_id})")], c=ON
    )
    assert (await wait_for_title(api, thread_id))["title"] == "Apples and pears"
    assert "title generation" not in chat_server.log_path.read_text()


async def test_model_and_instructions_from_the_options(
    chat_server: ServerProcess, chat_stub: ChatStub
) -> None:
    api = Api(chat_server.url)
    thread_id = await _untitled(api)
    config = {"generateTitle": {"options": {"model": "other-model", "instructions": "Three words."}}}
    await api.execute(SAVE, m=[text_message(thread_id=thread_id, text=f"hi {thread_id}")], c=config)
    assert (await wait_for_title(api, thread_id))["title"] == "Stub Title"
    [sent] = chat_stub.for_thread(thread_id)
    assert sent["model"] == "other-model"
    assert sent["messages"][0] == {"role": "system", "content": "Three words."}


async def test_a_slow_model_never_holds_the_save_nor_beats_a_user_title(
    chat_server: ServerProcess, chat_stub: ChatStub
) -> None:
    api = Api(chat_server.url)
    thread_id = await _untitled(api)
    chat_stub.replies[thread_id] = (200, "Generated late", 1.5)
    started = time.monotonic()
    await api.execute(SAVE, m=[text_message(thread_id=thread_id, text=f"hi {thread_id}")], c=ON)
    assert time.monotonic() - started < 1.0  # the title is generated in the background
    q = "mutation($i: UpdateThreadInput!) { updateThread(input: $i) { title } }"
    await api.execute(q, i={"id": thread_id, "title": "Mine"})
    assert (await settle(api, thread_id, 2.5))["title"] == "Mine"
    assert len(chat_stub.for_thread(thread_id)) == 1


async def test_a_failing_model_leaves_the_thread_untitled_until_the_next_save(
    chat_server: ServerProcess, chat_stub: ChatStub
) -> None:
    api = Api(chat_server.url)
    thread_id = await _untitled(api)
    chat_stub.replies[thread_id] = (500, "model down", 0.0)
    await api.execute(SAVE, m=[text_message(thread_id=thread_id, text=f"hi {thread_id}")], c=ON)
    await asyncio.sleep(0.5)
    assert len(chat_stub.for_thread(thread_id)) == 1
    assert (await settle(api, thread_id, 0))["title"] == ""
    chat_stub.replies[thread_id] = (200, "Recovered", 0.0)
    await api.execute(SAVE, m=[text_message(thread_id=thread_id, text="again")], c=ON)
    assert (await wait_for_title(api, thread_id))["title"] == "Recovered"
