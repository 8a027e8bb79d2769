"""The web pages without a browser: the explorer at /, static files, GraphiQL at /graphql (local or CDN)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from graphql import OperationDefinitionNode, parse, validate
from graphql.execution.values import get_variable_values
from starlette.testclient import TestClient

from schema import build_schema
from tests.support import REPO, ServerProcess, require, running_server
from web import frontend
from web.app import create_app
from web.settings import Settings

HTML = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
CDN_HOSTS = ("unpkg.com", "jsdelivr", "esm.sh", "cdnjs", "googleapis.com", "skypack", "jspm")
BUILT = frontend.graphiql_page_path().is_file()


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path, database_url=f"sqlite+aiosqlite:///{tmp_path / 'recallql.db'}")
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def asset_urls(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="([^"#:]+)"', html)


def test_explorer_page(client: TestClient) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    assert "<title>RecallQL · Memory explorer</title>" in page
    assert set(asset_urls(page)) >= {"static/explorer.css", "static/explorer.js", "graphql"}
    assert not any(host in page for host in CDN_HOSTS)
    # Every form control has a label; the results are announced.
    assert 'aria-live="polite"' in page
    assert client.head("/").status_code == 200
    # Neither page may be framed by another site (GraphiQL runs mutations where auth is off), and each
    # runs only what this server serves (tests/test_browser.py fails on anything the policy refuses).
    for page_response in (response, client.get("/graphql", headers=HTML)):
        headers = page_response.headers
        assert headers["x-frame-options"] == "DENY", headers
        policy = dict(d.strip().split(" ", 1) for d in headers["content-security-policy"].split(";"))
        assert policy["frame-ancestors"] == "'none'", policy
        if page_response is response or BUILT:  # without the build, GraphiQL's CDN page
            assert policy["default-src"] == "'none'", policy
            assert policy["script-src"] == policy["connect-src"] == "'self'", policy
        assert headers["x-content-type-options"] == "nosniff" and headers["referrer-policy"] == "no-referrer"
    assert response.headers["content-security-policy"] == frontend.EXPLORER_CSP


def test_static_assets(client: TestClient) -> None:
    js = client.get("/static/explorer.js")
    assert js.status_code == 200
    assert "javascript" in js.headers["content-type"]
    assert js.headers["cache-control"] == "no-cache"
    assert js.headers["x-content-type-options"] == "nosniff"
    assert "fetch(ENDPOINT" in js.text
    css = client.get("/static/explorer.css")
    assert css.status_code == 200
    assert css.headers["content-type"].startswith("text/css")
    assert client.get("/static/nothing-here.js").status_code == 404
    assert client.get("/static/../frontend.py").status_code == 404
    assert client.get("/static/%2e%2e/frontend.py").status_code == 404


def test_graphiql_served_locally(client: TestClient) -> None:
    require(BUILT, f"the GraphiQL build is missing ({frontend.graphiql_page_path()}): run web/build.sh")
    response = client.get("/graphql", headers=HTML)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    assert "<title>RecallQL · GraphiQL</title>" in page
    assert "Strawberry" not in page
    urls = asset_urls(page)
    assert {Path(u).suffix for u in urls} == {".css", ".js"}, urls
    for url in urls:
        assert url.startswith("static/build/graphiql/"), url
        asset = client.get(f"/{url}")
        assert asset.status_code == 200, url
        assert asset.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert not any(host in asset.text for host in CDN_HOSTS), url
    assert not any(host in page for host in CDN_HOSTS)
    # The Monaco workers and fonts the bundle loads are there too.
    built = {p.name for p in frontend.graphiql_page_path().parent.iterdir()}
    for worker in ("editor.worker-", "json.worker-", "graphql.worker-"):
        assert any(name.startswith(worker) for name in built), worker


@pytest.mark.parametrize("params", ["variables=%7B%7D", "operationName=Q", "extensions=%7B%7D"])
@pytest.mark.parametrize("accept", ["text/html", "*/*"])
def test_a_get_with_part_of_a_request_is_a_request_not_the_page(
    server: ServerProcess, params: str, accept: str
) -> None:
    """Strawberry served the page to any browser GET without `query`, so `?variables={}` got HTML where
    the README (and the auth layer, which lets the page through unauthenticated) says it is a request."""
    response = httpx.get(f"{server.url}/graphql?{params}", headers={"Accept": accept}, timeout=10)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["errors"][0]["message"] == "No GraphQL query found in the request"


def test_graphiql_falls_back_to_the_cdn_page_with_a_warning(
    client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(frontend, "BUILD_DIR", tmp_path / "no-build")
    with caplog.at_level(logging.WARNING, logger="recallql.frontend"):
        response = client.get("/graphql", headers=HTML)
        again = client.get("/graphql", headers=HTML)
    assert response.status_code == again.status_code == 200
    assert "Strawberry GraphiQL" in response.text
    # Its scripts come from a CDN: only framing is restricted.
    assert response.headers["content-security-policy"] == "frame-ancestors 'none'"
    warnings = [r for r in caplog.records if r.name == "recallql.frontend" and r.levelno == logging.WARNING]
    assert len(warnings) == 1, "the warning is logged once, not on every request"
    message = warnings[0].getMessage()
    assert "GraphiQL build not found" in message
    assert "CDN" in message
    assert "web/build.sh" in message


def test_real_server_serves_the_pages(server: ServerProcess) -> None:
    explorer = httpx.get(f"{server.url}/", timeout=10)
    assert explorer.status_code == 200
    assert "Memory explorer" in explorer.text
    graphiql = httpx.get(f"{server.url}/graphql", headers=HTML, timeout=10)
    assert graphiql.status_code == 200
    log = server.log_path.read_text()
    if BUILT:
        assert "RecallQL · GraphiQL" in graphiql.text
        assert "GraphiQL build not found" not in log
    else:
        assert "Strawberry GraphiQL" in graphiql.text
        assert "GraphiQL build not found" in log
    api = httpx.post(f"{server.url}/graphql", json={"query": "{ __typename }"}, timeout=10)
    assert api.json() == {"data": {"__typename": "Query"}}


def test_build_script_fails_clearly_without_npm(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("dirname", "find"):
        found = shutil.which(tool)
        assert found, tool
        (tools / tool).symlink_to(found)
    bash = shutil.which("bash")
    assert bash
    result = subprocess.run(
        [bash, str(REPO / "web" / "build.sh")],
        env={"PATH": str(tools), "FORCE": "1", "HOME": os.environ.get("HOME", "/tmp")},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    assert "npm (Node.js >= 20) is required" in result.stderr


def example_tabs() -> list[dict[str, str]]:
    """The tabs GraphiQL opens with (web/frontend/examples.js), as Node reads them."""
    node = shutil.which("node")
    require(node is not None, "Node.js is not installed")
    assert node is not None
    script = (
        "import {DEFAULT_TABS} from './web/frontend/examples.js'; console.log(JSON.stringify(DEFAULT_TABS))"
    )
    done = subprocess.run(
        [node, "--input-type=module", "-e", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    tabs: list[dict[str, str]] = json.loads(done.stdout)
    return tabs


def test_graphiql_examples_are_valid_queries() -> None:
    """The tabs GraphiQL opens with parse and validate against the schema, variables included: an
    example that the schema moved away from would greet people with an error."""
    tabs = example_tabs()
    assert len(tabs) >= 5
    schema = build_schema()._schema
    for tab in tabs:
        document = parse(tab["query"])
        assert validate(schema, document) == [], tab["query"]
        (operation,) = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
        coerced = get_variable_values(schema, operation.variable_definitions, json.loads(tab["variables"]))
        assert not isinstance(coerced, list), (coerced, tab["query"])  # a list: the errors
        assert misindented(tab["query"]) == [], tab["query"]


def misindented(query: str) -> list[str]:
    """The lines of a query not indented two spaces per open brace or parenthesis (an example built
    from a fragment of text indented for another depth read crookedly)."""
    wrong, depth = [], 0
    for line in query.splitlines():
        code = line.split("#", 1)[0]
        if not code.strip():
            continue
        closing = len(code.strip()) - len(code.strip().lstrip("})"))
        if len(code) - len(code.lstrip(" ")) != 2 * (depth - closing):
            wrong.append(line)
        depth += code.count("{") + code.count("(") - code.count("}") - code.count(")")
    return wrong


def test_graphiql_examples_run_on_a_fresh_server(tmp_path: Path) -> None:
    """Run as their comments say (the Seed tab first, on a fresh server), every query and mutation tab
    answers without errors and with the sample data: an example that runs but shows nothing teaches
    nothing."""

    def operation(tab: dict[str, str]) -> OperationDefinitionNode:
        (found,) = [d for d in parse(tab["query"]).definitions if isinstance(d, OperationDefinitionNode)]
        return found

    tabs = [t for t in example_tabs() if operation(t).operation.value != "subscription"]
    (seed,) = [t for t in tabs if operation(t).name.value == "Seed"]  # type: ignore[union-attr]
    answers = {}
    with running_server(tmp_path / "data") as server:
        for tab in [seed, *[t for t in tabs if t is not seed]]:
            body = {"query": tab["query"], "variables": json.loads(tab["variables"])}
            answer = httpx.post(f"{server.url}/graphql", json=body, timeout=30).json()
            assert "errors" not in answer, (answer, tab["query"])
            answers[operation(tab).name.value] = answer["data"]  # type: ignore[union-attr]
    assert answers["NewestPage"]["recall"]["messages"], answers["NewestPage"]
    resource_page = answers["ResourceMessages"]["resource"]["messages"]
    assert resource_page["total"] == len(resource_page["messages"]) > 0, resource_page
    assert {m["threadId"] for m in resource_page["messages"]} == {"t1"}, resource_page
    times = [m["createdAt"] for m in resource_page["messages"]]
    assert times == sorted(times, reverse=True), times
