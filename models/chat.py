"""An OpenAI-compatible chat completions client (title generation)."""

from __future__ import annotations

from typing import Any

import httpx


class ChatError(Exception):
    """The endpoint failed or answered something that is not a chat completion."""


class ChatClient:
    """``POST {base_url}/v1/chat/completions``; ``base_url`` may end in ``/v1`` (it is not doubled)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        base = base_url.rstrip("/")
        self.url = f"{base}/chat/completions" if base.endswith("/v1") else f"{base}/v1/chat/completions"
        self.model = model
        self.timeout = timeout
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout)

    def __repr__(self) -> str:
        return f"ChatClient(model={self.model!r}, url={self.url!r})"

    async def complete(self, messages: list[dict[str, str]], *, model: str | None = None) -> str:
        """The text of the first choice."""
        payload: dict[str, Any] = {"model": model or self.model, "messages": messages}
        try:
            response = await self._client.post(self.url, json=payload, headers=self._headers)
        except httpx.HTTPError as exc:
            raise ChatError(f"chat request to {self.url} failed: {exc!r}") from exc
        if response.status_code >= 400:
            raise ChatError(
                f"chat request to {self.url} answered {response.status_code}: {response.text[:200]}"
            )
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ChatError(f"unexpected chat completion from {self.url}: {response.text[:200]}") from exc
        if not isinstance(content, str):
            raise ChatError(f"the chat completion from {self.url} has no text content")
        return content

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()
