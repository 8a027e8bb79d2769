"""Builds the collaborators (database engine, embedder, vector index) from settings."""

from __future__ import annotations

import logging

from models.chat import ChatClient
from models.chroma_process import IsolatedChromaIndex
from models.embedders import Embedder, HttpEmbedder, OnnxMiniLMEmbedder
from models.repository import Repository
from models.vector_index import ChromaIndex
from resolvers.events import EventBroker, InProcessBroker, RedisBroker
from resolvers.semantic import SemanticMemory, VectorIndex
from web.settings import Settings

log = logging.getLogger("recallql")


def has_embedder(settings: Settings) -> bool:
    """Whether semantic recall is on: an embeddings endpoint, or a model folder (build_embedder's
    choice, without loading anything)."""
    if settings.embedder == "off":
        return False
    return bool(settings.embeddings_url) or settings.resolved_model_dir() is not None


def build_embedder(settings: Settings) -> Embedder | None:
    if settings.embedder == "off":
        return None
    if settings.embeddings_url:
        if not settings.embeddings_model:
            raise SystemExit("RECALLQL_EMBEDDINGS_MODEL is required with RECALLQL_EMBEDDINGS_URL")
        return HttpEmbedder(
            settings.embeddings_url,
            settings.embeddings_model,
            api_key=settings.embeddings_api_key,
            dimension=settings.embeddings_dimension,
            max_concurrency=settings.embeddings_concurrency,
            batch_size=settings.embeddings_batch,
            timeout=settings.embeddings_timeout,
        )
    model_dir = settings.resolved_model_dir()
    if model_dir is None:
        return None
    return OnnxMiniLMEmbedder(
        model_dir, name=settings.embedding_model_name, workers=settings.embedding_workers
    )


def build_semantic(settings: Settings, repository: Repository) -> SemanticMemory | None:
    embedder = build_embedder(settings)
    if embedder is None:
        if settings.embedder == "off":
            log.info("semantic recall is off (RECALLQL_EMBEDDER=off)")
        else:
            log.warning(
                "semantic recall is off: no embedding model found. Set RECALLQL_EMBEDDING_MODEL_DIR to a "
                "folder holding onnx/model.onnx (all-MiniLM-L6-v2) or RECALLQL_EMBEDDINGS_URL to an "
                "embeddings endpoint."
            )
        return None
    timeout = settings.chroma_timeout
    if settings.chroma_url:
        url, database = settings.chroma_url, settings.chroma_database

        def factory(model: str, dimension: int) -> VectorIndex:
            return ChromaIndex(
                url=url, model_name=model, dimension=dimension, timeout=timeout, database=database
            )

    else:
        path = settings.chroma_path
        path.mkdir(parents=True, exist_ok=True)
        embedded = IsolatedChromaIndex if settings.chroma_process else ChromaIndex

        cached = settings.chroma_cached_indexes

        def factory(model: str, dimension: int) -> VectorIndex:
            return embedded(
                path=path, model_name=model, dimension=dimension, cached_indexes=cached, timeout=timeout
            )

    where = settings.chroma_url or settings.chroma_path
    log.info(
        "semantic recall: %r, vectors in %s%s",
        embedder,
        where,
        " (a child process)" if settings.chroma_process and not settings.chroma_url else "",
    )
    return SemanticMemory(
        repository,
        embedder,
        factory,
        background=settings.vector_writes == "background",
        pipeline_batch=settings.vector_batch,
    )


def build_chat(settings: Settings) -> ChatClient | None:
    """The title model's endpoint, when configured (titles fall back to a heuristic otherwise)."""
    if not settings.chat_url:
        return None
    if not settings.chat_model:
        raise SystemExit("RECALLQL_CHAT_MODEL is required with RECALLQL_CHAT_URL")
    return ChatClient(
        settings.chat_url, settings.chat_model, api_key=settings.chat_api_key, timeout=settings.chat_timeout
    )


def build_events(settings: Settings) -> EventBroker:
    """Redis pub/sub when RECALLQL_REDIS_URL is set (several processes), else in-process fan-out."""
    if settings.redis_url:
        log.info("live updates through Redis (channel prefix %r)", settings.redis_prefix)
        return RedisBroker(settings.redis_url, prefix=settings.redis_prefix)
    return InProcessBroker()
