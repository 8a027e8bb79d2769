"""Retrieval quality of semantic recall with the real all-MiniLM-L6-v2 model (the default ONNX embedder),
measured through the API on a labelled set (tests/data/semantic_quality.json): 216 chat messages in 9
topical threads of 3 resources, and 40 natural-language queries with the messages that answer them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from models.vector_index import ChromaIndex, collection_name
from tests.support import MODEL_DIR, Api, at, require, running_server, text_message, uid

DATA = Path(__file__).parent / "data" / "semantic_quality.json"
MODEL_NAME = "all-MiniLM-L6-v2"
K = 5

RECALL = """
query($threadId: ID!, $resourceId: String, $text: String, $config: MemoryConfigInput) {
  recall(threadId: $threadId, resourceId: $resourceId, perPage: 0, vectorSearchString: $text,
         threadConfig: $config) { total messages { id threadId resourceId } }
}
"""


@dataclass
class Corpus:
    api: Api
    http: httpx.AsyncClient  # one keep-alive connection for the many searches
    prefix: str  # keeps this run's ids apart on the shared Chroma server
    threads: list[dict[str, Any]]
    queries: list[dict[str, Any]]
    chroma_url: str

    def id(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def thread(self, name: str) -> dict[str, Any]:
        return next(t for t in self.threads if t["id"] == name)


@pytest.fixture(scope="module")
async def corpus(tmp_path_factory: pytest.TempPathFactory, chroma_server: str) -> AsyncIterator[Corpus]:
    require((MODEL_DIR / "onnx" / "model.onnx").is_file(), f"all-MiniLM-L6-v2 not found in {MODEL_DIR}/onnx")
    data = json.loads(DATA.read_text(encoding="utf-8"))
    env = {
        "RECALLQL_EMBEDDING_MODEL_DIR": str(MODEL_DIR),
        "RECALLQL_EMBEDDINGS_URL": "",  # empty counts as unset: the local ONNX model, whatever the shell says
        "RECALLQL_CHROMA_URL": chroma_server,
        # Two single-threaded model workers (the other servers of the suite run the default, one):
        # retrieval quality and the vectors' parity below then hold for both.
        "RECALLQL_EMBEDDING_WORKERS": "2",
    }
    prefix = uid("q")
    with running_server(tmp_path_factory.mktemp("quality") / "data", env) as server:
        http = httpx.AsyncClient(base_url=server.url, timeout=60)
        corpus = Corpus(Api(server.url), http, prefix, data["threads"], data["queries"], chroma_server)
        for n, thread in enumerate(data["threads"]):
            thread_id = corpus.id(thread["id"])
            await corpus.api.execute(
                "mutation($i: CreateThreadInput!) { createThread(input: $i) { id } }",
                i={"id": thread_id, "resourceId": corpus.id(thread["resourceId"]), "title": thread["title"]},
            )
            messages = [
                text_message(
                    thread_id=thread_id,
                    id=corpus.id(m["id"]),
                    role=m["role"],
                    text=m["text"],
                    created_at=at(n * 1000 + i * 30),
                )
                for i, m in enumerate(thread["messages"])
            ]
            await corpus.api.execute(
                "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }",
                m=messages,
            )
        try:
            yield corpus
        finally:
            await http.aclose()


async def top_k(corpus: Corpus, query: dict[str, Any], k: int, scope: str) -> list[dict[str, Any]]:
    """The top-k hits of a query (perPage 0, no context: the hits alone), in thread or resource scope."""
    thread = corpus.thread(query["thread"])
    variables = {
        "threadId": corpus.id(thread["id"]),
        "resourceId": corpus.id(thread["resourceId"]),
        "text": query["text"],
        "config": {"semanticRecall": {"options": {"topK": k, "messageRange": {"size": 0}, "scope": scope}}},
    }
    response = await corpus.http.post("/graphql", json={"query": RECALL, "variables": variables})
    body = response.json()
    assert response.status_code == 200 and "errors" not in body, body
    assert body["data"]["recall"]["total"] == 0
    return body["data"]["recall"]["messages"]


@pytest.mark.parametrize(
    ("scope", "min_recall", "min_hit1"),
    [("THREAD", 0.8, 0.8), ("RESOURCE", 0.8, 0.75)],
)
async def test_retrieval_quality(corpus: Corpus, scope: str, min_recall: float, min_hit1: float) -> None:
    assert len(corpus.queries) >= 30 and sum(len(t["messages"]) for t in corpus.threads) >= 200
    recalls, precisions, hits_at_1, misses = [], [], [], []
    for query in corpus.queries:
        relevant = {corpus.id(r) for r in query["relevant"]}
        thread = corpus.thread(query["thread"])
        found = await top_k(corpus, query, K, scope)
        assert len(found) == K
        # Scope is a hard boundary, whatever the similarity.
        if scope == "THREAD":
            assert {m["threadId"] for m in found} == {corpus.id(thread["id"])}
        assert {m["resourceId"] for m in found} == {corpus.id(thread["resourceId"])}
        got = {m["id"] for m in found} & relevant
        recalls.append(len(got) / len(relevant))
        precisions.append(len(got) / len(found))
        best = await top_k(corpus, query, 1, scope)
        hits_at_1.append(float(best[0]["id"] in relevant))
        if len(got) < len(relevant):
            misses.append(f"{query['id']} {query['text']!r}: missed {sorted(relevant - got)}")
    recall_at_k, precision_at_k, hit_at_1 = (float(np.mean(v)) for v in (recalls, precisions, hits_at_1))
    print(
        f"\nsemantic recall quality, {scope.lower()} scope, {len(corpus.queries)} queries, all-MiniLM-L6-v2: "
        f"recall@{K} {recall_at_k:.3f}, precision@{K} {precision_at_k:.3f} "
        f"(at most {np.mean([len(q['relevant']) / K for q in corpus.queries]):.3f} here), "
        f"hit@1 {hit_at_1:.3f}"
    )
    for miss in misses:
        print("  " + miss)
    assert recall_at_k >= min_recall
    assert hit_at_1 >= min_hit1


@pytest.fixture(scope="module")
def chroma_embed() -> Callable[[list[str]], np.ndarray]:
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    function = ONNXMiniLM_L6_V2()

    def embed(texts: list[str]) -> np.ndarray:
        # DOWNLOAD_PATH is a class attribute read on every call: it points Chroma at the model folder (it
        # would download otherwise).
        saved = ONNXMiniLM_L6_V2.DOWNLOAD_PATH
        ONNXMiniLM_L6_V2.DOWNLOAD_PATH = MODEL_DIR
        try:
            return np.asarray(function(texts), dtype=np.float64)
        finally:
            ONNXMiniLM_L6_V2.DOWNLOAD_PATH = saved

    return embed


async def test_server_vectors_equal_chromadb_function(
    corpus: Corpus, chroma_embed: Callable[[list[str]], np.ndarray]
) -> None:
    """The vectors the server stored (read back from the Chroma server) are chromadb's own ONNX ones."""
    thread = corpus.thread("omar-k8s")
    sample = thread["messages"][:6]
    # ChromaIndex only for its client (aclose also closes the HTTP sessions chromadb's close() leaves open).
    index = ChromaIndex(url=corpus.chroma_url, model_name=MODEL_NAME, dimension=384)
    try:
        client = await asyncio.to_thread(index._get_client)
        collection = client.get_collection(collection_name(corpus.id(thread["resourceId"]), MODEL_NAME, 384))
        got = collection.get(ids=[f"{corpus.id(m['id'])}:0" for m in sample], include=["embeddings"])
    finally:
        await index.aclose()
    assert got["ids"] == [f"{corpus.id(m['id'])}:0" for m in sample]
    ours = np.asarray(got["embeddings"], dtype=np.float64)
    theirs = chroma_embed([m["text"] for m in sample])
    cosine = (ours * theirs).sum(axis=1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
    assert cosine.min() >= 0.99999, cosine
