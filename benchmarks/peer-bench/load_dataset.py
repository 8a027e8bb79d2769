"""Loads peer-bench's JSON Lines dataset ($DATASET) into RecallQL at $PEER_URL through its GraphQL API."""

from __future__ import annotations

import os
import sys
from typing import Any

import httpx
import orjson

CREATE = "mutation($i: CreateThreadInput!) { createThread(input: $i) { id } }"
SAVE = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { acknowledged } }"


def post(client: httpx.Client, query: str, **variables: Any) -> None:
    response = client.post("/graphql", json={"query": query, "variables": variables})
    response.raise_for_status()
    body = response.json()
    if body.get("errors"):
        raise SystemExit(f"load_dataset: {body['errors']}")


def main() -> None:
    threads: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    with open(os.environ["DATASET"], "rb") as lines:
        for line in lines:
            record = orjson.loads(line)
            if record["kind"] == "thread":
                threads.append(record["thread"])
            elif record["kind"] == "message":
                messages.append(record["message"])
    with httpx.Client(base_url=os.environ["PEER_URL"], timeout=120) as client:
        for t in threads:
            post(
                client,
                CREATE,
                i={
                    "id": t["id"],
                    "resourceId": t["resourceId"],
                    "title": t.get("title"),
                    "metadata": t.get("metadata"),
                    "createdAt": t.get("createdAt"),
                },
            )
        for start in range(0, len(messages), 500):
            batch = [
                {
                    "id": m["id"],
                    "threadId": m["threadId"],
                    "resourceId": m.get("resourceId"),
                    "role": m["role"],
                    "type": m.get("type"),
                    "createdAt": m["createdAt"],
                    "content": m["content"],
                }
                for m in messages[start : start + 500]
            ]
            post(client, SAVE, m=batch)
    print(f"loaded {len(threads)} threads and {len(messages)} messages", file=sys.stderr)


if __name__ == "__main__":
    main()
