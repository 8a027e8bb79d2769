"""Fixtures of the conformance tests (the recall oracle's and the resource-listing oracle's)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.conformance import harness
from tests.support import require


@pytest.fixture(scope="module")
def embedder() -> Iterator[harness.EmbedServer]:
    """The hash-64 embeddings server both sides call; node is checked here, before anything runs."""
    require(shutil.which("node") is not None, "node (>= 20) is not installed: the Mastra oracle cannot run")
    with harness.embed_server() as server:
        yield server
