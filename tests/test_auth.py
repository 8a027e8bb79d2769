"""Authentication (web/auth.py): the mode decision, API keys, JWTs (HS256, RS256 from a JWKS file or URL),
401s over real HTTP, WebSocket authentication for subscriptions, the keys CLI, and the principal reaching
the compiled read path. Tenant isolation itself is tests/test_tenant_isolation.py."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import websockets
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from resolvers.auth import NOBODY, OPEN, Principal
from resolvers.context import RequestContext, Services
from schema import build_schema
from tests.factories import msg, seed
from tests.support import (
    REPO,
    ServerProcess,
    free_port,
    persisted,
    require,
    running_server,
    text_message,
    uid,
)
from web.auth import (
    KEY_PREFIX,
    OFF_WARNING,
    Authenticator,
    Unauthenticated,
    auth_required,
    hash_key,
    is_loopback,
    key_entry,
    new_key,
    parse_api_keys,
)
from web.cli import main as cli_main
from web.settings import Settings

SECRET = "test-secret-" + "x" * 40
ISSUER = "https://issuer.test"
AUDIENCE = "recallql"


# ---------------------------------------------------------------------------------------------- helpers
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwks(*keys: tuple[str, rsa.RSAPrivateKey]) -> dict[str, Any]:
    out = []
    for kid, key in keys:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
        out.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
    return {"keys": out}


def forge_hs256(payload: dict[str, Any], key: bytes, kid: str) -> str:
    """An HS256 token made by hand (PyJWT refuses to use a public key as an HMAC secret)."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signing_input = f"{b64(json.dumps({'alg': 'HS256', 'typ': 'JWT', 'kid': kid}).encode())}." + b64(
        json.dumps(payload).encode()
    )
    signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


def hs256(claims: dict[str, Any], secret: str = SECRET) -> str:
    return jwt.encode(claims, secret, algorithm="HS256")


def rs256(claims: dict[str, Any], key: rsa.RSAPrivateKey, kid: str | None = "k1") -> str:
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid} if kid else None)


def claims(**extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600, **extra}


def settings(**values: Any) -> Settings:
    return Settings(**{"auth": "required", **values})


async def rejected(authenticator: Authenticator, authorization: str | None) -> Unauthenticated:
    with pytest.raises(Unauthenticated) as caught:
        await authenticator.authenticate(authorization)
    return caught.value


class WsSession:
    """graphql-transport-ws spoken directly, so close codes and error payloads can be checked."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.next_id = 0

    async def subscribe(self, query: str, **variables: Any) -> str:
        self.next_id += 1
        op = str(self.next_id)
        await self.ws.send(
            json.dumps({"id": op, "type": "subscribe", "payload": {"query": query, "variables": variables}})
        )
        return op

    async def receive(self, timeout: float = 5.0) -> dict[str, Any]:
        return json.loads(await asyncio.wait_for(self.ws.recv(), timeout))

    async def receive_for(self, op: str, timeout: float = 5.0) -> dict[str, Any]:
        while True:
            message = await self.receive(timeout)
            if message.get("id") == op:
                return message


@contextlib.asynccontextmanager
async def ws_session(
    base_url: str, *, init_payload: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> AsyncIterator[WsSession]:
    """A connection that sent connection_init and got connection_ack (raises ConnectionClosed if the
    server refused it)."""
    url = base_url.replace("http://", "ws://", 1) + "/graphql"
    async with websockets.connect(
        url, subprotocols=["graphql-transport-ws"], additional_headers=headers or {}
    ) as ws:
        await ws.send(json.dumps({"type": "connection_init", "payload": init_payload or {}}))
        ack = json.loads(await asyncio.wait_for(ws.recv(), 5))
        assert ack["type"] == "connection_ack", ack
        yield WsSession(ws)


async def ws_refused(base_url: str, **kwargs: Any) -> int:
    """The close code of a connection the server refuses at connection_init."""
    return (await ws_refusal(base_url, **kwargs))[0]


async def ws_refusal(base_url: str, **kwargs: Any) -> tuple[int, str]:
    """The close code and reason of a connection the server refuses at connection_init."""
    with pytest.raises(websockets.ConnectionClosed) as closed:
        async with ws_session(base_url, **kwargs):
            pass
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code, closed.value.rcvd.reason


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def gql(
    url: str, query: str, token: str | None = None, **variables: Any
) -> tuple[int, dict[str, Any], httpx.Headers]:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            f"{url}/graphql",
            json={"query": query, "variables": variables},
            headers=bearer(token) if token else {},
        )
    return response.status_code, response.json(), response.headers


def codes(body: dict[str, Any]) -> list[str]:
    return [e["extensions"]["code"] for e in body.get("errors") or []]


# ---------------------------------------------------------------------------------------------- mode
@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("10.0.0.1", False),
        ("example.com", False),
        ("", False),
    ],
)
def test_auto_mode_is_open_only_on_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    assert auth_required("auto", host) is (not loopback)
    assert auth_required("required", host) is True
    assert auth_required("off", host) is False


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="RECALLQL_AUTH"):
        auth_required("maybe", "127.0.0.1")
    with pytest.raises(ValueError):
        Settings(auth="maybe")  # type: ignore[arg-type]


async def test_off_means_open_and_nobody_is_refused_everything() -> None:
    off = Authenticator(Settings(auth="off", host="0.0.0.0"))
    assert not off.enabled and off.default_principal is OPEN
    assert await off.authenticate(None) is OPEN
    assert await off.authenticate("Bearer whatever") is OPEN
    on = Authenticator(settings())
    assert on.enabled and on.default_principal is NOBODY
    assert not NOBODY.can_access("anything") and NOBODY.restricted


# ---------------------------------------------------------------------------------------------- API keys
def test_api_key_entries_are_validated() -> None:
    digest = hash_key("k")
    good = parse_api_keys(
        [
            {"name": "web", "sha256": digest, "resources": ["a", "b"]},
            {"name": "ops", "sha256": "0" * 64, "admin": True},
        ]
    )
    assert good[0].resources == frozenset({"a", "b"}) and good[1].resources is None
    bad: list[tuple[Any, str]] = [
        ([{"sha256": digest, "resources": ["a"]}], "name"),
        ([{"name": "x", "sha256": "abc", "resources": ["a"]}], "64 hex"),
        ([{"name": "x", "sha256": digest}], "resources"),
        ([{"name": "x", "sha256": digest, "resources": []}], "resources"),
        ([{"name": "x", "sha256": digest, "resources": [""]}], "resources"),
        ([{"name": "x", "sha256": digest, "admin": True, "resources": ["a"]}], "admin key"),
        ([{"name": "x", "sha256": digest, "admin": "yes"}], "admin"),
        ([{"name": "x", "sha256": digest, "resources": ["a"], "scopes": []}], "unknown"),
        (
            [
                {"name": "x", "sha256": digest, "resources": ["a"]},
                {"name": "x", "sha256": "1" * 64, "resources": ["a"]},
            ],
            "twice",
        ),
        (
            [
                {"name": "x", "sha256": digest, "resources": ["a"]},
                {"name": "y", "sha256": digest.upper(), "resources": ["b"]},
            ],
            "twice",
        ),
        (["nope"], "object"),
    ]
    for entries, message in bad:
        with pytest.raises(ValueError, match=message):
            parse_api_keys(entries)


def test_api_keys_setting_reads_json_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = {"name": "web", "sha256": hash_key("k"), "resources": ["alice"]}
    monkeypatch.setenv("RECALLQL_API_KEYS", json.dumps([entry]))
    monkeypatch.setenv("RECALLQL_AUTH", "required")
    loaded = Settings(_env_file=None)
    assert loaded.auth == "required" and loaded.api_keys == [entry]


async def test_api_keys_valid_invalid_missing_admin() -> None:
    alice, ops = new_key(), new_key()
    auth = Authenticator(
        settings(
            api_keys=[
                key_entry("web", alice, resources=["alice", "alice2"]),
                key_entry("ops", ops, admin=True),
            ]
        )
    )
    assert alice.startswith(KEY_PREFIX) and len(alice) > 40 and alice != ops
    principal = await auth.authenticate(f"Bearer {alice}")
    assert principal == Principal("key:web", frozenset({"alice", "alice2"}))
    assert (await auth.authenticate(f"bearer   {alice}  ")).name == "key:web"  # scheme case, spaces
    admin = await auth.authenticate(f"Bearer {ops}")
    assert admin.admin and admin.name == "key:ops"

    missing = await rejected(auth, None)
    assert missing.status == 401 and not missing.invalid_token
    assert json.loads(missing.body()) == {
        "errors": [{"message": missing.message, "extensions": {"code": "UNAUTHENTICATED"}}]
    }
    assert missing.headers() == [(b"www-authenticate", b'Bearer realm="recallql"')]
    for value in ("", "Bearer", "Bearer ", f"Basic {alice}", alice, f"Bearer {alice}x", "Bearer rql_nope"):
        error = await rejected(auth, value)
        assert error.code == "UNAUTHENTICATED"
    wrong = await rejected(auth, f"Bearer {alice[:-1]}")
    assert wrong.invalid_token and (
        b"www-authenticate",
        b'Bearer realm="recallql", error="invalid_token"',
    ) in (wrong.headers())


# ---------------------------------------------------------------------------------------------- JWT
async def test_jwt_hs256() -> None:
    auth = Authenticator(settings(jwt_secret=SECRET, jwt_issuer=ISSUER, jwt_audience=AUDIENCE))
    alice = claims(sub="alice")
    assert (await auth.authenticate(f"Bearer {hs256(alice)}")) == Principal(
        "jwt:alice", frozenset({"alice"}), expires_at=alice["exp"]
    )
    # The principal expires with the token (plus the leeway), or never without an `exp`.
    lenient = Authenticator(
        settings(jwt_secret=SECRET, jwt_issuer=ISSUER, jwt_audience=AUDIENCE, jwt_leeway=30)
    )
    assert (await lenient.authenticate(f"Bearer {hs256(alice)}")).expires_at == alice["exp"] + 30
    lasting = {k: v for k, v in alice.items() if k != "exp"}
    assert (await auth.authenticate(f"Bearer {hs256(lasting)}")).expires_at is None
    # An exp beyond a double (valid JSON) was an OverflowError, a 500: it is "never".
    assert (await auth.authenticate(f"Bearer {hs256({**alice, 'exp': 10**400})}")).expires_at is None
    now = int(time.time())
    for token, reason in [
        (hs256(claims(sub="alice", exp=now - 10)), "expired"),
        (hs256(claims(sub="alice", aud="someone-else")), "audience"),
        (hs256({k: v for k, v in claims(sub="alice").items() if k != "aud"}), "aud"),
        (hs256(claims(sub="alice", iss="https://evil.test")), "issuer"),
        (hs256({k: v for k, v in claims(sub="alice").items() if k != "iss"}), "iss"),
        (hs256(claims(sub="alice"), secret="another-secret-" + "y" * 40), "Signature verification failed"),
        (hs256(claims(sub="alice", nbf=now + 3600)), "not yet valid"),
        # PyJWT reads int(exp), so a string passed; a WebSocket it opened then never closed.
        (hs256(claims(sub="alice", exp=str(now + 3600))), "exp claim must be a number"),
        (hs256(claims()), "'sub' claim"),  # no resource claim
        (hs256(claims(sub=""), secret=SECRET), "'sub' claim"),
        # RFC 7519's sub is one string (the README says: name another claim to grant several).
        (hs256(claims(sub=["alice", "bob"])), "Subject must be a string"),
        (jwt.encode(claims(sub="alice"), None, algorithm="none"), "algorithm 'none'"),
        (rs256(claims(sub="alice"), rsa_key()), "algorithm 'RS256'"),  # no JWKS configured
        ("aaa.bbb.ccc", "Invalid token"),
    ]:
        error = await rejected(auth, f"Bearer {token}")
        assert error.code == "UNAUTHENTICATED" and error.invalid_token
        assert reason.lower() in error.message.lower(), (reason, error.message)


async def test_a_jwt_lifetime_bound_refuses_tokens_without_exp_or_lasting_longer() -> None:
    """RECALLQL_JWT_MAX_LIFETIME: no token lasts forever, or longer than the bound, whatever its issuer
    put in it (a backend minting its own tokens and forgetting exp, a leaked long-lived one)."""
    now = int(time.time())
    bounded = Authenticator(
        settings(jwt_secret=SECRET, jwt_issuer=ISSUER, jwt_audience=AUDIENCE, jwt_max_lifetime=3600)
    )
    hour = claims(sub="alice", exp=now + 3500)
    assert (await bounded.authenticate(f"Bearer {hs256(hour)}")).expires_at == hour["exp"]
    lasting = {k: v for k, v in claims(sub="alice").items() if k != "exp"}
    for token, reason in [
        (hs256(lasting), 'missing the "exp" claim'),
        (hs256(claims(sub="alice", exp=now + 7200)), "expires more than 3600 seconds from now"),
        (hs256(claims(sub="alice", exp=10**400)), "expires more than 3600 seconds from now"),
    ]:
        error = await rejected(bounded, f"Bearer {token}")
        assert error.code == "UNAUTHENTICATED" and reason in error.message, error.message
    # The leeway allows the clock skew it allows on exp.
    lenient = Authenticator(settings(jwt_secret=SECRET, jwt_max_lifetime=3600, jwt_leeway=120))
    later = {"sub": "alice", "exp": now + 3650}
    assert (await lenient.authenticate(f"Bearer {hs256(later)}")).expires_at == later["exp"] + 120
    with pytest.raises(ValueError, match="greater than 0"):
        settings(jwt_max_lifetime=0)


async def test_jwt_resource_claim_as_list_and_admin_claim() -> None:
    auth = Authenticator(
        settings(jwt_secret=SECRET, jwt_resource_claim="recallql_resources", jwt_admin_claim="recallql_admin")
    )
    listed = await auth.authenticate(f"Bearer {hs256({'sub': 'u1', 'recallql_resources': ['a', 'b']})}")
    assert listed == Principal("jwt:u1", frozenset({"a", "b"}))
    single = await auth.authenticate(f"Bearer {hs256({'sub': 'u1', 'recallql_resources': 'a'})}")
    assert single.resources == frozenset({"a"}) and single.only_resource() == "a"
    admin = await auth.authenticate(f"Bearer {hs256({'sub': 'ops', 'recallql_admin': True})}")
    assert admin.admin
    # Only the boolean true makes an admin; the sub claim is not a resource here.
    for payload in (
        {"sub": "u1", "recallql_admin": "true"},
        {"sub": "u1"},
        {"sub": "u1", "recallql_resources": []},
        {"sub": "u1", "recallql_resources": ["a", 3]},
        {"sub": "u1", "recallql_resources": {"a": 1}},
    ):
        error = await rejected(auth, f"Bearer {hs256(payload)}")
        assert "recallql_resources" in error.message
    # Without issuer/audience settings, tokens without them verify; a token with an `aud` then does not
    # (set RECALLQL_JWT_AUDIENCE when tokens carry one).
    await rejected(auth, f"Bearer {hs256({'sub': 'u1', 'recallql_resources': 'a', 'aud': 'x'})}")


def test_short_jwt_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        Authenticator(settings(jwt_secret="short"))


async def test_jwt_rs256_from_a_jwks_file(tmp_path: Path) -> None:
    key1, key2, stranger = rsa_key(), rsa_key(), rsa_key()
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(("k1", key1))))
    auth = Authenticator(settings(jwt_jwks_file=path, jwt_issuer=ISSUER, jwt_audience=AUDIENCE))
    assert (await auth.authenticate(f"Bearer {rs256(claims(sub='alice'), key1)}")).resources == {"alice"}
    # A single key also serves tokens without a kid.
    assert (
        await auth.authenticate(f"Bearer {rs256(claims(sub='alice'), key1, kid=None)}")
    ).name == "jwt:alice"
    assert "kid" in (await rejected(auth, f"Bearer {rs256(claims(sub='a'), key2, kid='k2')}")).message
    assert "signature" in (await rejected(auth, f"Bearer {rs256(claims(sub='a'), stranger)}")).message.lower()
    expired = rs256(claims(sub="a", exp=int(time.time()) - 5), key1)
    assert "expired" in (await rejected(auth, f"Bearer {expired}")).message
    # HS256 "signed" with the public key (algorithm confusion): no HS256 secret is configured, so refused.
    public_pem = key1.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    confused = forge_hs256(claims(sub="alice"), public_pem, kid="k1")
    assert "algorithm 'HS256'" in (await rejected(auth, f"Bearer {confused}")).message
    # Key rotation: a new kid in the file is picked up without a restart.
    replace_file(path, jwks(("k1", key1), ("k2", key2)))
    assert (await auth.authenticate(f"Bearer {rs256(claims(sub='bob'), key2, kid='k2')}")).name == "jwt:bob"
    # A broken file stops startup with its name.
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(ValueError, match=r"bad\.json"):
        Authenticator(settings(jwt_jwks_file=tmp_path / "bad.json"))


def replace_file(path: Path, document: dict[str, Any] | str) -> None:
    """How a JWKS file is rotated: written beside it, then renamed over it in one step."""
    staged = path.with_suffix(".new")
    staged.write_text(document if isinstance(document, str) else json.dumps(document))
    os.replace(staged, path)


async def test_a_jwks_file_change_revokes_and_replaces_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key1, key2, key3 = rsa_key(), rsa_key(), rsa_key()
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(("k1", key1), ("k2", key2))))
    auth = Authenticator(settings(jwt_jwks_file=path, jwt_issuer=ISSUER, jwt_audience=AUDIENCE))
    token1 = f"Bearer {rs256(claims(sub='alice'), key1, kid='k1')}"
    token2 = f"Bearer {rs256(claims(sub='bob'), key2, kid='k2')}"
    token3 = f"Bearer {rs256(claims(sub='carol'), key3, kid='k2')}"
    assert (await auth.authenticate(token1)).name == "jwt:alice"
    # Removing k1 revokes it at once, though its kid was known before.
    replace_file(path, jwks(("k2", key2)))
    assert "kid" in (await rejected(auth, token1)).message
    # A token without a kid does not fall back to the key that was removed.
    untagged = f"Bearer {rs256(claims(sub='alice'), key1, kid=None)}"
    assert "signature" in (await rejected(auth, untagged)).message.lower()
    assert (await auth.authenticate(token2)).name == "jwt:bob"
    # A new key under the same kid replaces the old one.
    replace_file(path, jwks(("k2", key3)))
    assert "signature" in (await rejected(auth, token2)).message.lower()
    assert (await auth.authenticate(token3)).name == "jwt:carol"
    # A file caught halfway through a write keeps the keys read before, with one warning.
    caplog.set_level("WARNING", logger="recallql.auth")
    replace_file(path, '{"keys": [')
    for _ in range(3):
        assert (await auth.authenticate(token3)).name == "jwt:carol"
    warnings = [r.getMessage() for r in caplog.records if "keeping the keys read before" in r.getMessage()]
    assert len(warnings) == 1 and "jwks.json" in warnings[0]
    # Nor does a file that cannot be read at all (removed by mistake).
    path.unlink()
    assert (await auth.authenticate(token3)).name == "jwt:carol"
    # An empty key set is a revocation of every key, not a broken file.
    replace_file(path, {"keys": []})
    assert "kid" in (await rejected(auth, token3)).message


@contextlib.contextmanager
def jwks_server(
    document: dict[str, Any] | list[Any] | bytes, *, changing: list[bytes] | None = None
) -> Iterator[str]:
    """A JWKS endpoint serving `document`, or the last of `changing` at each request."""
    fixed = document if isinstance(document, bytes) else json.dumps(document).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = changing[-1] if changing else fixed
            self.send_response(200)
            self.send_header(
                "Content-Type", "text/html" if isinstance(document, bytes) else "application/json"
            )
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


async def test_jwt_rs256_from_a_jwks_url() -> None:
    key = rsa_key()
    with jwks_server(jwks(("k1", key))) as url:
        auth = Authenticator(settings(jwt_jwks_url=url, jwt_resource_claim="tenants"))
        principal = await auth.authenticate(f"Bearer {rs256({'sub': 'u', 'tenants': ['a', 'b']}, key)}")
        assert principal.resources == frozenset({"a", "b"})
        error = await rejected(auth, f"Bearer {rs256({'sub': 'u', 'tenants': 'a'}, rsa_key())}")
        assert error.code == "UNAUTHENTICATED"
        error = await rejected(auth, f"Bearer {rs256({'sub': 'u', 'tenants': 'a'}, key, kid='k9')}")
        assert (error.status, error.code) == (401, "UNAUTHENTICATED") and "k9" in error.message
    unreachable = Authenticator(settings(jwt_jwks_url=f"http://127.0.0.1:{free_port()}/jwks"))
    error = await rejected(unreachable, f"Bearer {rs256({'sub': 'a'}, key)}")
    assert error.status == 503 and error.code == "SERVICE_UNAVAILABLE"
    # An endpoint that answers with nothing usable (an HTML error page, no keys, not an object, only
    # encryption keys) is the server's problem as much as an unreachable one: 503, not 500 or 401.
    encryption_only = {"keys": [{**jwks(("k1", key))["keys"][0], "use": "enc"}]}
    for document in (b"<html>502 Bad Gateway</html>", {"keys": []}, [1, 2], encryption_only):
        with jwks_server(document) as url:
            broken = Authenticator(settings(jwt_jwks_url=url))
            error = await rejected(broken, f"Bearer {rs256({'sub': 'a'}, key)}")
            assert (error.status, error.code) == (503, "SERVICE_UNAVAILABLE"), (document, error.message)


async def test_a_jwks_refresh_that_brings_back_nothing_usable_is_503() -> None:
    """A token with an unknown kid makes PyJWT fetch the key set again; an HTML page or an empty set
    in that answer is the endpoint's fault (it was a 401 blaming the token)."""
    key = rsa_key()
    bodies = [json.dumps(jwks(("k1", key))).encode()]
    with jwks_server(b"", changing=bodies) as url:
        auth = Authenticator(settings(jwt_jwks_url=url))
        assert auth.jwt.jwks_client is not None
        auth.jwt.jwks_client.cooldown_duration = 0  # refresh at once for an unknown kid
        assert (await auth.authenticate(f"Bearer {rs256({'sub': 'a'}, key)}")).resources == {"a"}
        unknown = f"Bearer {rs256({'sub': 'a'}, rsa_key(), kid='k9')}"
        assert (await rejected(auth, unknown)).status == 401  # a good set without k9: the token's fault
        for body in (b"<html>502 Bad Gateway</html>", b'{"keys": []}', b"[1]"):
            bodies.append(body)
            error = await rejected(auth, unknown)
            assert (error.status, error.code) == (503, "SERVICE_UNAVAILABLE"), (body, error.message)


# ------------------------------------------------------------------------------------ the compiled path
async def test_the_compiled_read_path_applies_the_principal(services: Services) -> None:
    await seed(services, msg("m1"), msg("o1", thread="t2", resource="r2"), threads={"t1": "r1", "t2": "r2"})
    schema = build_schema()
    r1 = Principal("key:r1", frozenset({"r1"}))

    async def run(query: str, principal: Principal) -> tuple[Any, Any]:
        plan = schema.fast_path.plan(query, None)
        assert plan is not None, "the compiled path should handle this query"
        fast = await schema.fast_path.execute(
            plan, None, RequestContext(services=services, principal=principal)
        )
        normal = await schema.execute(
            query, context_value=RequestContext(services=services, principal=principal)
        )
        return fast, normal

    fast, normal = await run('{ a: thread(id: "t1") { id } b: thread(id: "t2") { id } }', r1)
    assert fast == {"data": {"a": {"id": "t1"}, "b": None}} and normal.data == fast["data"]
    fast, normal = await run('{ messages(ids: ["m1", "o1"]) { id } }', r1)
    assert fast == {"data": {"messages": [{"id": "m1"}, None]}} and normal.data == fast["data"]
    fast, normal = await run('{ recall(threadId: "t1", include: [{id: "o1"}]) { messages { id } } }', r1)
    assert fast == {"data": {"recall": {"messages": [{"id": "m1"}]}}}
    # Refusals are answered as the normal path answers them.
    for query in ('{ recall(threadId: "t2") { total } }', '{ threads(resourceId: "r2") { total } }'):
        fast, normal = await run(query, r1)
        assert normal.errors and normal.errors[0].extensions["code"] == "FORBIDDEN"
        assert fast is not None and fast["data"] is None and normal.data is None
        assert [e["extensions"]["code"] for e in fast["errors"]] == ["FORBIDDEN"]
        assert fast["errors"][0]["message"] == normal.errors[0].message
    # Unrestricted, everything as before.
    fast, _ = await run('{ messages(ids: ["m1", "o1"]) { id } }', OPEN)
    assert fast == {"data": {"messages": [{"id": "m1"}, {"id": "o1"}]}}


# ---------------------------------------------------------------------------------------------- over HTTP
ALICE, BOB, CAROL = uid("alice"), uid("bob"), uid("carol")
KEYS = {"alice": new_key(), "bob": new_key(), "multi": new_key(), "admin": new_key()}
JWT_KEY = rsa_key()


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("auth-server")
    (tmp / "jwks.json").write_text(json.dumps(jwks(("k1", JWT_KEY))))
    env = {
        "RECALLQL_AUTH": "required",
        "RECALLQL_API_KEYS": json.dumps(
            [
                key_entry("alice-web", KEYS["alice"], resources=[ALICE]),
                key_entry("bob-web", KEYS["bob"], resources=[BOB]),
                key_entry("multi", KEYS["multi"], resources=[ALICE, CAROL]),
                key_entry("ops", KEYS["admin"], admin=True),
            ]
        ),
        "RECALLQL_JWT_SECRET": SECRET,
        "RECALLQL_JWT_JWKS_FILE": str(tmp / "jwks.json"),
        "RECALLQL_JWT_ISSUER": ISSUER,
        "RECALLQL_JWT_AUDIENCE": AUDIENCE,
        "RECALLQL_JWT_RESOURCE_CLAIM": "resources",
        "RECALLQL_JWT_ADMIN_CLAIM": "recallql_admin",
        "RECALLQL_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'auth.db'}",
    }
    with running_server(tmp / "data", env) as server:
        yield server


CREATE = "mutation($i: CreateThreadInput!) { createThread(input: $i) { id resourceId } }"
SAVE = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }"
THREAD = "query($id: ID!) { thread(id: $id) { id title } }"
THREADS = "query($r: String!) { threads(resourceId: $r) { total threads { id } } }"
MESSAGE_EVENTS = "subscription($t: ID!) { messageSaved(threadId: $t) { kind messageId message { id } } }"
THREAD_EVENTS = "subscription($r: String!) { threadUpdated(resourceId: $r) { kind threadId } }"


async def test_missing_and_invalid_tokens_are_401(auth_server: ServerProcess) -> None:
    url = auth_server.url
    status, body, headers = await gql(url, "{ __typename }")
    assert status == 401
    assert body == {
        "errors": [{"message": body["errors"][0]["message"], "extensions": {"code": "UNAUTHENTICATED"}}]
    }
    assert "Authorization: Bearer" in body["errors"][0]["message"]
    assert headers["www-authenticate"] == 'Bearer realm="recallql"'
    now = int(time.time())
    for token in (
        "rql_not-a-key",
        KEYS["alice"] + "x",
        hs256(claims(resources=ALICE, exp=now - 30)),  # expired
        hs256(claims(resources=ALICE, aud="other")),  # wrong audience
        hs256(claims(resources=ALICE, iss="https://evil.test")),  # wrong issuer
        hs256(claims(resources=ALICE), secret="z" * 40),  # wrong signature
        rs256(claims(resources=ALICE), rsa_key()),  # signed by a key not in the JWKS
    ):
        status, body, headers = await gql(url, "{ __typename }", token)
        assert status == 401, body
        assert codes(body) == ["UNAUTHENTICATED"] and body["errors"][0]["message"].startswith("Invalid")
        assert headers["www-authenticate"] == 'Bearer realm="recallql", error="invalid_token"'
    async with httpx.AsyncClient() as client:
        # GET queries need the token too; the Authorization scheme must be Bearer.
        response = await client.get(f"{url}/graphql", params={"query": "{ __typename }"})
        assert response.status_code == 401
        response = await client.post(
            f"{url}/graphql",
            json={"query": "{ __typename }"},
            headers={"Authorization": f"Basic {KEYS['alice']}"},
        )
        assert response.status_code == 401


async def test_open_endpoints_stay_open(auth_server: ServerProcess) -> None:
    async with httpx.AsyncClient() as client:
        for path in ("/healthz", "/readyz", "/metrics"):
            response = await client.get(f"{auth_server.url}{path}")
            assert response.status_code == 200, path
        ide = await client.get(f"{auth_server.url}/graphql", headers={"Accept": "text/html"})
        assert ide.status_code == 200 and "<html" in ide.text.lower()
        explorer = await client.get(f"{auth_server.url}/", headers={"Accept": "text/html"})
        assert explorer.status_code == 200


async def test_api_keys_over_http(auth_server: ServerProcess) -> None:
    url = auth_server.url
    mine, theirs = uid("t"), uid("t")
    status, body, _ = await gql(url, CREATE, KEYS["alice"], i={"id": mine, "resourceId": ALICE})
    assert status == 200 and body["data"]["createThread"] == {"id": mine, "resourceId": ALICE}
    _, body, _ = await gql(url, CREATE, KEYS["bob"], i={"id": theirs, "resourceId": BOB})
    assert body["data"]["createThread"]["id"] == theirs
    _, body, _ = await gql(url, CREATE, KEYS["alice"], i={"id": uid("t"), "resourceId": BOB})
    assert codes(body) == ["FORBIDDEN"] and body["data"] is None
    # Another resource's thread is null; its list FORBIDDEN.
    _, body, _ = await gql(url, THREAD, KEYS["alice"], id=theirs)
    assert body == {"data": {"thread": None}}
    _, body, _ = await gql(url, THREADS, KEYS["alice"], r=BOB)
    assert codes(body) == ["FORBIDDEN"] and BOB in body["errors"][0]["message"]
    _, body, _ = await gql(url, THREADS, KEYS["alice"], r=ALICE)
    assert [t["id"] for t in body["data"]["threads"]["threads"]] == [mine]
    # A two-resource key sees both of its resources, and still not bob's.
    carol_thread = uid("t")
    _, body, _ = await gql(url, CREATE, KEYS["multi"], i={"id": carol_thread, "resourceId": CAROL})
    assert body["data"]["createThread"]["resourceId"] == CAROL
    _, body, _ = await gql(url, THREAD, KEYS["multi"], id=mine)
    assert body["data"]["thread"]["id"] == mine
    _, body, _ = await gql(url, THREAD, KEYS["multi"], id=theirs)
    assert body["data"]["thread"] is None
    # Recall without resourceId: one-resource keys read as their resource, multi-resource keys as the
    # thread's owner when they hold it.
    await gql(url, SAVE, KEYS["alice"], m=[text_message(thread_id=mine, id=uid("m"), text="hi")])
    recall = "query($t: ID!) { recall(threadId: $t) { total } }"
    assert (await gql(url, recall, KEYS["alice"], t=mine))[1]["data"]["recall"]["total"] == 1
    assert (await gql(url, recall, KEYS["multi"], t=mine))[1]["data"]["recall"]["total"] == 1
    assert codes((await gql(url, recall, KEYS["multi"], t=theirs))[1]) == ["FORBIDDEN"]
    # The admin key reads everything.
    _, body, _ = await gql(url, THREAD, KEYS["admin"], id=theirs)
    assert body["data"]["thread"]["id"] == theirs
    _, body, _ = await gql(url, THREADS, KEYS["admin"], r=ALICE)
    assert body["data"]["threads"]["total"] == 1


async def test_a_persisted_querys_hash_by_get_is_authenticated(auth_server: ServerProcess) -> None:
    # A GET with only a hash carries no query parameter, and was let through as the GraphiQL page:
    # run without a token, and with the token ignored (a key read nothing of its own by hashed GET).
    url = auth_server.url
    mine = uid("t")
    await gql(url, CREATE, KEYS["alice"], i={"id": mine, "resourceId": ALICE})
    extensions = json.dumps(persisted(THREADS))  # a GET parameter
    variables = json.dumps({"r": ALICE})
    async with httpx.AsyncClient(timeout=30) as client:
        registered = await client.post(
            f"{url}/graphql",
            json={"query": THREADS, "variables": {"r": ALICE}, "extensions": persisted(THREADS)},
            headers=bearer(KEYS["alice"]),
        )
        expected = registered.json()
        assert expected["data"]["threads"]["total"] >= 1
        for token in (None, "rql_not-a-key"):
            refused = await client.get(
                f"{url}/graphql",
                params={"extensions": extensions, "variables": variables},
                headers=bearer(token) if token else {},
            )
            assert refused.status_code == 401 and codes(refused.json()) == ["UNAUTHENTICATED"]
        served = await client.get(
            f"{url}/graphql",
            params={"extensions": extensions, "variables": variables},
            headers=bearer(KEYS["alice"]),
        )
        assert served.json() == expected  # as alice, not as nobody
        bob = await client.get(
            f"{url}/graphql",
            params={"extensions": extensions, "variables": variables},
            headers=bearer(KEYS["bob"]),
        )
        assert codes(bob.json()) == ["FORBIDDEN"]


async def test_a_jwt_lifetime_bound_over_http(tmp_path: Path) -> None:
    env = {
        "RECALLQL_AUTH": "required",
        "RECALLQL_JWT_SECRET": SECRET,
        "RECALLQL_JWT_MAX_LIFETIME": "3600",
        "RECALLQL_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'bounded.db'}",
    }
    with running_server(tmp_path / "data", env) as server:
        now = int(time.time())
        query = "query($r: String!) { threads(resourceId: $r) { total } }"
        status, body, _ = await gql(server.url, query, hs256({"sub": ALICE, "exp": now + 600}), r=ALICE)
        assert (status, body["data"]["threads"]["total"]) == (200, 0), body
        for token, reason in [
            (hs256({"sub": ALICE}), 'missing the "exp" claim'),
            (hs256({"sub": ALICE, "exp": now + 86_400}), "(RECALLQL_JWT_MAX_LIFETIME)"),
        ]:
            status, body, headers = await gql(server.url, query, token, r=ALICE)
            assert (status, codes(body)) == (401, ["UNAUTHENTICATED"]), body
            assert reason in body["errors"][0]["message"], body
            assert 'error="invalid_token"' in headers["www-authenticate"]


async def test_jwts_over_http(auth_server: ServerProcess) -> None:
    url = auth_server.url
    alice_hs = hs256(claims(sub="u1", resources=[ALICE]))
    alice_rs = rs256(claims(sub="u2", resources=ALICE), JWT_KEY)
    ops = hs256(claims(sub="ops", recallql_admin=True))
    thread = uid("t")
    _, body, _ = await gql(url, CREATE, alice_hs, i={"id": thread, "resourceId": ALICE})
    assert body["data"]["createThread"]["id"] == thread
    _, body, _ = await gql(url, THREAD, alice_rs, id=thread)
    assert body["data"]["thread"]["id"] == thread
    _, body, _ = await gql(url, CREATE, alice_rs, i={"id": uid("t"), "resourceId": BOB})
    assert codes(body) == ["FORBIDDEN"] and "jwt:u2" in body["errors"][0]["message"]
    _, body, _ = await gql(url, THREADS, ops, r=ALICE)
    assert thread in [t["id"] for t in body["data"]["threads"]["threads"]]


async def test_websocket_authentication_for_subscriptions(auth_server: ServerProcess) -> None:
    url = auth_server.url
    mine, theirs = uid("t"), uid("t")
    await gql(url, CREATE, KEYS["alice"], i={"id": mine, "resourceId": ALICE})
    await gql(url, CREATE, KEYS["bob"], i={"id": theirs, "resourceId": BOB})
    # No token, a bad token, a bad upgrade header: refused at connection_init (4403), saying why (the
    # reason was "Forbidden" alone, all GraphiQL showed to a tab without the token).
    assert await ws_refusal(url) == (
        4403,
        'Forbidden: Authentication required: send {"Authorization": "Bearer <token>"} in connection_init.',
    )
    assert await ws_refusal(url, init_payload={"Authorization": "Bearer rql_wrong"}) == (
        4403,
        "Forbidden: Invalid token.",
    )
    assert await ws_refused(url, headers={"Authorization": "Bearer rql_wrong"}) == 4403
    expired = hs256(claims(resources=ALICE, exp=int(time.time()) - 30))
    code, reason = await ws_refusal(url, init_payload={"Authorization": f"Bearer {expired}"})
    assert code == 4403 and reason.startswith("Forbidden: Invalid token: "), reason

    async def receives_own_events(session: WsSession) -> None:
        op = await session.subscribe(MESSAGE_EVENTS, t=mine)
        message_id = uid("m")
        deadline = time.monotonic() + 20
        while True:  # the subscription is live a moment after it was sent
            await gql(url, SAVE, KEYS["alice"], m=[text_message(thread_id=mine, id=message_id, text="x")])
            try:
                event = await session.receive_for(op, timeout=0.5)
                break
            except TimeoutError:
                assert time.monotonic() < deadline, "no event"
        assert event["type"] == "next" and event["payload"]["data"]["messageSaved"]["messageId"] == message_id

    # The token in connection_init, or in the upgrade request.
    async with ws_session(url, init_payload=bearer(KEYS["alice"])) as session:
        await receives_own_events(session)
        # Another resource's thread or resource: FORBIDDEN when subscribing.
        for query, variables in ((MESSAGE_EVENTS, {"t": theirs}), (THREAD_EVENTS, {"r": BOB})):
            op = await session.subscribe(query, **variables)
            answer = await session.receive_for(op)
            assert answer["type"] in ("error", "next"), answer
            errors = answer["payload"] if answer["type"] == "error" else answer["payload"]["errors"]
            assert [e["extensions"]["code"] for e in errors] == ["FORBIDDEN"], answer
    async with ws_session(url, headers=bearer(KEYS["alice"])) as session:
        await receives_own_events(session)
    rs = rs256(claims(sub="u", resources=[ALICE]), JWT_KEY)
    async with ws_session(url, init_payload={"authorization": f"Bearer {rs}"}) as session:
        await receives_own_events(session)
    # A valid connection_init token wins over a bad upgrade header.
    async with ws_session(
        url, init_payload=bearer(KEYS["alice"]), headers={"Authorization": "Bearer rql_wrong"}
    ) as session:
        await receives_own_events(session)


async def test_a_websocket_is_closed_when_its_token_expires(auth_server: ServerProcess) -> None:
    """A token checked at connection_init does not keep a connection open past its `exp`: the server
    closes it (4403 "Token expired"), which ends its subscriptions, on both protocols."""
    url = auth_server.url
    mine = uid("t")
    await gql(url, CREATE, KEYS["alice"], i={"id": mine, "resourceId": ALICE})
    expires = int(time.time()) + 4
    token = hs256(claims(resources=ALICE, exp=expires))
    async with (
        ws_session(url, init_payload=bearer(KEYS["alice"])) as lasting,
        ws_session(url, init_payload=bearer(token)) as session,
    ):
        op = await session.subscribe(MESSAGE_EVENTS, t=mine)
        first = uid("m")
        await gql(url, SAVE, KEYS["alice"], m=[text_message(thread_id=mine, id=first, text="x")])
        with contextlib.suppress(TimeoutError):  # the subscription may go live after this first save
            await session.receive_for(op, timeout=1)
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                await session.receive(timeout=15)
        assert closed.value.rcvd is not None
        assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4403, "Token expired")
        assert time.time() >= expires
        # A credential without an expiry (this API key) keeps its connection.
        await lasting.ws.send(json.dumps({"type": "ping"}))
        assert (await lasting.receive())["type"] == "pong"
    # The legacy protocol is closed the same way.
    legacy_url = url.replace("http://", "ws://", 1) + "/graphql"
    expires = int(time.time()) + 3
    token = hs256(claims(resources=ALICE, exp=expires))
    async with websockets.connect(legacy_url, subprotocols=["graphql-ws"]) as ws:
        await ws.send(json.dumps({"type": "connection_init", "payload": bearer(token)}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "connection_ack"
        start = {"query": MESSAGE_EVENTS, "variables": {"t": mine}}
        await ws.send(json.dumps({"id": "1", "type": "start", "payload": start}))
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(ws.recv(), 15)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403
        assert time.time() >= expires
    # The legacy protocol takes a second connection_init: the connection closes at the earliest expiry
    # of the tokens it was given, whichever came first.
    expires = int(time.time()) + 3
    async with websockets.connect(legacy_url, subprotocols=["graphql-ws"]) as ws:
        later = hs256(claims(resources=ALICE, exp=int(time.time()) + 600))
        await ws.send(json.dumps({"type": "connection_init", "payload": bearer(later)}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "connection_ack"
        short = hs256(claims(resources=ALICE, exp=expires))
        await ws.send(json.dumps({"type": "connection_init", "payload": bearer(short)}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "connection_ack"
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(ws.recv(), 15)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403
        assert time.time() >= expires


# ---------------------------------------------------------------------------------------------- keys CLI
def test_keys_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["keys", "new", "--name", "web", "--resource", "alice", "--resource", "bob"]) == 0
    out = capsys.readouterr()
    lines = dict(line.split(":", 1) for line in out.out.strip().splitlines())
    key, entry = lines["key"].strip(), json.loads(lines["entry"])
    assert key.startswith(KEY_PREFIX) and len(key) >= 40
    assert entry == {
        "name": "web",
        "sha256": hashlib.sha256(key.encode()).hexdigest(),
        "resources": ["alice", "bob"],
    }
    assert "shown once" in out.err
    assert parse_api_keys([entry])[0].resources == frozenset({"alice", "bob"})

    assert cli_main(["keys", "new", "--name", "ops", "--admin"]) == 0
    admin = json.loads(dict(line.split(":", 1) for line in capsys.readouterr().out.splitlines())["entry"])
    assert admin["admin"] is True and "resources" not in admin
    for argv in (
        ["keys", "new", "--name", "x"],
        ["keys", "new", "--name", "x", "--admin", "--resource", "a"],
    ):
        with pytest.raises(SystemExit) as exited:
            cli_main(argv)
        assert exited.value.code == 2
    capsys.readouterr()
    # Two runs never give the same key.
    assert new_key() != new_key()


def test_keys_cli_entry_works_against_a_server(tmp_path: Path) -> None:
    """The printed entry, pasted into RECALLQL_API_KEYS, authenticates the printed key."""
    out = subprocess.run(
        [sys.executable, "-m", "web.cli", "keys", "new", "--name", "cli", "--resource", "r-cli"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    fields = dict(line.split(":", 1) for line in out.strip().splitlines())
    key, entry = fields["key"].strip(), fields["entry"].strip()
    env = {"RECALLQL_AUTH": "required", "RECALLQL_API_KEYS": f"[{entry}]"}
    with running_server(tmp_path / "data", env) as server:
        ok = httpx.post(
            f"{server.url}/graphql",
            json={"query": '{ threads(resourceId: "r-cli") { total } }'},
            headers=bearer(key),
        )
        assert ok.status_code == 200 and ok.json() == {"data": {"threads": {"total": 0}}}
        assert httpx.post(f"{server.url}/graphql", json={"query": "{ __typename }"}).status_code == 401


# ------------------------------------------------------------------------------------ auto mode, served
def test_auto_mode_on_loopback_is_open_and_warns(tmp_path: Path) -> None:
    with running_server(tmp_path / "data", {"RECALLQL_AUTH": "auto"}) as server:
        response = httpx.post(
            f"{server.url}/graphql", json={"query": '{ threads(resourceId: "x") { total } }'}
        )
        assert response.status_code == 200 and response.json() == {"data": {"threads": {"total": 0}}}
        assert OFF_WARNING in server.log_path.read_text()


@pytest.mark.parametrize(
    ("variables", "said"),
    [
        (
            {"RECALLQL_VECTOR_BATCH": "0", "RECALLQL_PORT": "s3cr3t-port"},
            ["RECALLQL_VECTOR_BATCH: Input should be greater than or equal to 1", "RECALLQL_PORT: "],
        ),
        (
            {"RECALLQL_VECTOR_BATCH": "9000"},
            ["RECALLQL_VECTOR_BATCH: Input should be less than or equal to 8192"],
        ),
        ({"RECALLQL_API_KEYS": "s3cr3t-key"}, ["RECALLQL_API_KEYS", "(expected JSON)"]),
        # Numbers out of range used to be taken: an interval of 0 spun the drainer at 100% CPU, a
        # negative body limit refused every request.
        (
            {"RECALLQL_VECTOR_DRAIN_INTERVAL": "0"},
            ["RECALLQL_VECTOR_DRAIN_INTERVAL: Input should be greater than 0"],
        ),
        (
            {"RECALLQL_MAX_BODY_BYTES": "-1"},
            ["RECALLQL_MAX_BODY_BYTES: Input should be greater than or equal to 1"],
        ),
        ({"RECALLQL_PORT": "99999"}, ["RECALLQL_PORT: Input should be less than or equal to 65535"]),
        # A save of 20,000 messages in as many threads ran PostgreSQL out of lock slots.
        (
            {"RECALLQL_MAX_SAVE_BATCH": "20000"},
            ["RECALLQL_MAX_SAVE_BATCH: Input should be less than or equal to 10000"],
        ),
        (
            {"RECALLQL_LAST_MESSAGES": "-5"},
            ["RECALLQL_LAST_MESSAGES: Input should be greater than or equal to 0"],
        ),
        # Another driver's URL was a 40-line traceback ending in "No module named 'psycopg'".
        (
            {"RECALLQL_DATABASE_URL": "postgresql+psycopg://s3cr3t@db/app"},
            ["RECALLQL_DATABASE_URL", "postgresql+asyncpg://"],
        ),
        # Found only as each worker built its services (several workers: one failure each).
        (
            {"RECALLQL_CHAT_URL": "http://127.0.0.1:1"},
            ["RECALLQL_CHAT_MODEL is required with RECALLQL_CHAT_URL"],
        ),
        # Accepted, and failed only on use (a server with a Chroma "URL" without a scheme reported itself
        # ready); a Redis URL of no scheme failed every worker as it started, a traceback each.
        (
            {"RECALLQL_CHROMA_URL": "chroma.s3cr3t.internal:8000"},
            ["RECALLQL_CHROMA_URL: Value error, not an http:// or https:// URL"],
        ),
        (
            {"RECALLQL_EMBEDDINGS_URL": "http://embed:s3cr3t/v1", "RECALLQL_EMBEDDINGS_MODEL": "m"},
            ["RECALLQL_EMBEDDINGS_URL", "numeric port"],
        ),
        ({"RECALLQL_JWT_JWKS_URL": "jwks.json"}, ["RECALLQL_JWT_JWKS_URL"]),
        ({"RECALLQL_OTEL_ENDPOINT": "collector:4318"}, ["RECALLQL_OTEL_ENDPOINT"]),
        # A statement cut by the command timeout while it still waited for a lock reported the database
        # unreachable, where the lock timeout's own error says what happened.
        (
            {"RECALLQL_DB_LOCK_TIMEOUT": "120"},
            ["RECALLQL_DB_COMMAND_TIMEOUT (60 s) must be longer than RECALLQL_DB_LOCK_TIMEOUT (120 s)"],
        ),
        (
            {"RECALLQL_CHROMA_DATABASE": "prod"},
            ["RECALLQL_CHROMA_DATABASE names a database of the Chroma server (RECALLQL_CHROMA_URL)"],
        ),
        (
            {"RECALLQL_CHROMA_URL": "http://127.0.0.1:1", "RECALLQL_CHROMA_DATABASE": "a b"},
            ["RECALLQL_CHROMA_DATABASE: String should match pattern"],
        ),
        (
            {"RECALLQL_REDIS_URL": "user:s3cr3t@redis:6379"},
            ["RECALLQL_REDIS_URL: Value error, not a redis://, rediss:// or unix:// URL"],
        ),
        # What asyncpg and redis-py refuse on first use was a traceback from every command and worker.
        (
            {"RECALLQL_DATABASE_URL": "postgresql+asyncpg://u:s3cr3t@127.0.0.1:99999/db"},
            ["RECALLQL_DATABASE_URL: Value error, the port 99999 is not one from 1 to 65535"],
        ),
        (
            {"RECALLQL_DATABASE_URL": "postgresql+asyncpg://u:s3cr3t@127.0.0.1:1/db?sslmode=bogus"},
            ["RECALLQL_DATABASE_URL: Value error, sslmode 'bogus' is not one of disable, allow"],
        ),
        (
            {"RECALLQL_REDIS_URL": "redis://:s3cr3t@127.0.0.1:abc"},
            ["RECALLQL_REDIS_URL: Value error, its port is not a number from 0 to 65535"],
        ),
        (
            {"RECALLQL_DATABASE_URL": "sqlite+aiosqlite:///:memory:"},
            ["RECALLQL_DATABASE_URL: Value error, an in-memory SQLite database keeps nothing"],
        ),
        (
            {"RECALLQL_DATABASE_URL": "sqlite+aiosqlite://"},
            ["RECALLQL_DATABASE_URL: Value error, an in-memory SQLite database keeps nothing"],
        ),
        # Memory defaults no request could run with were taken, and then every save, recall or
        # working-memory call failed as BAD_USER_INPUT, the client blamed for the server's setting.
        (
            {"RECALLQL_GENERATE_TITLE": '{"enabled": true, "minMessages": "lots"}'},
            ["RECALLQL_GENERATE_TITLE: generateTitle.minMessages must be a positive integer."],
        ),
        (
            {"RECALLQL_SEMANTIC_RECALL": '{"topK": -1}'},
            ["RECALLQL_SEMANTIC_RECALL: semanticRecall.topK must be a positive integer."],
        ),
        (
            {"RECALLQL_SEMANTIC_RECALL": '{"messageRange": "x"}'},
            ["RECALLQL_SEMANTIC_RECALL: semanticRecall.messageRange must be >= 0."],
        ),
        (
            {"RECALLQL_WORKING_MEMORY": '{"enabled": true, "scope": "galaxy"}'},
            ["RECALLQL_WORKING_MEMORY: workingMemory.scope must be 'resource' or 'thread'."],
        ),
    ],
)
def test_a_bad_setting_is_named_without_a_traceback_or_its_value(
    tmp_path: Path, variables: dict[str, str], said: list[str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "web.cli", "migrate", "--data-dir", str(tmp_path)],
        cwd=REPO,
        env={**os.environ, **variables},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("recallql: ") and "Traceback" not in done.stderr, done.stderr
    for text in said:
        assert text in done.stderr, done.stderr
    # The value may be a secret (API keys, a JWT secret, a database URL with its password).
    assert "s3cr3t" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--port", "99999"], "RECALLQL_PORT: Input should be less than or equal to 65535"),
        (["--port", "0"], "RECALLQL_PORT: Input should be greater than or equal to 1"),
        (["--workers", "0"], "RECALLQL_WORKERS: Input should be greater than or equal to 1"),
        (["--workers", "-1"], "RECALLQL_WORKERS: Input should be greater than or equal to 1"),
    ],
)
def test_serve_checks_its_flags_as_the_settings_they_stand_for(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    # `--port 99999` listened on 34463 (modulo 65536) and said 99999; `--workers -1` started.
    done = subprocess.run(
        [sys.executable, "-m", "web.cli", "serve", "--data-dir", str(tmp_path), *flags],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--data-dir", ""],
        ["serve", "--host", ""],
        ["migrate", "--database-url", ""],
        ["migrate", "--data-dir", " "],
        ["reindex", "--resource", ""],
        ["check-index", "--database-url", ""],
        ["import", "jsonl", "--from", ""],
        ["import", "mastra", "--from", "", "--data-dir", ""],
        ["export", "--out", ""],
        ["export", "--resource", ""],
        ["keys", "new", "--name", "", "--admin"],
        ["keys", "new", "--name", "k", "--resource", ""],
    ],
)
def test_an_empty_option_is_refused(tmp_path: Path, args: list[str]) -> None:
    """`--database-url "$URL"` with $URL unset silently used the local SQLite file (an empty variable is
    as good as unset), and `--data-dir ""` made the current folder the data folder."""
    done = subprocess.run(
        [sys.executable, "-m", "web.cli", *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.rstrip().endswith(": must not be empty"), done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing created in the current folder


def test_serve_on_a_public_host_requires_authentication(tmp_path: Path) -> None:
    """`recallql serve --host 0.0.0.0` passes the host to the workers: auto mode turns authentication on."""
    server = ServerProcess(
        tmp_path / "data",
        {"RECALLQL_AUTH": "auto"},
        command=(sys.executable, "-m", "web.cli", "serve", "--host", "0.0.0.0"),
    )
    try:
        server.wait_ready()
        response = httpx.post(f"{server.url}/graphql", json={"query": "{ __typename }"})
        assert response.status_code == 401
        assert response.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
        text = server.log_path.read_text()
        assert OFF_WARNING not in text and "every GraphQL request will be refused" in text
    finally:
        server.stop()


async def test_explorer_asks_for_a_token(auth_server: ServerProcess) -> None:
    """The explorer page loads without a token; its first API call is answered 401, it asks for a token
    once (a browser prompt), and sends it from then on."""
    chromium = Path("/usr/bin/chromium")
    require(importlib.util.find_spec("playwright") is not None, "the playwright package is not installed")
    require(chromium.exists(), f"{chromium} is missing (apt-get install chromium)")
    from playwright.async_api import async_playwright

    thread = uid("t")
    await gql(auth_server.url, CREATE, KEYS["alice"], i={"id": thread, "resourceId": ALICE, "title": "Mine"})
    prompts: list[str] = []

    async def answer(dialog: Any) -> None:
        prompts.append(dialog.message)
        await dialog.accept(KEYS["alice"])

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(chromium), args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page()
            page.set_default_timeout(30_000)
            page.on("dialog", answer)
            await page.goto(f"{auth_server.url}/")
            await page.get_by_label("Resource id").fill(ALICE)
            await page.get_by_label("Resource id").press("Enter")
            await page.locator(f'#threads button[data-thread-id="{thread}"]').wait_for()
            await page.get_by_label("Resource id").fill(BOB)
            await page.get_by_label("Resource id").press("Enter")
            await page.locator("#errors", has_text="FORBIDDEN").wait_for()
        finally:
            await browser.close()
    assert len(prompts) == 1 and "token" in prompts[0]


# ---------------------------------------------------------------------------------------------- DNS rebinding
async def test_without_authentication_only_this_machines_names_reach_the_server(tmp_path: Path) -> None:
    # With authentication off on a loopback bind, a page whose own name was pointed at 127.0.0.1 (DNS
    # rebinding) was same-origin for the browser: its mutations were served and its WebSocket accepted.
    with running_server(tmp_path / "data", {"RECALLQL_AUTH": "auto", "RECALLQL_EMBEDDER": "off"}) as server:
        evil = f"rebind.attacker.example:{server.port}"
        create = {"query": 'mutation { createThread(input: {id: "t", resourceId: "r"}) { id } }'}
        async with httpx.AsyncClient(timeout=10) as client:
            refused = await client.post(
                f"{server.url}/graphql", json=create, headers={"Host": evil, "Origin": f"http://{evil}"}
            )
            assert refused.status_code == 403
            assert refused.json()["errors"][0]["extensions"]["code"] == "FORBIDDEN"
            assert "rebind.attacker.example" in refused.json()["errors"][0]["message"]
            found = await client.post(f"{server.url}/graphql", json={"query": '{ thread(id: "t") { id } }'})
            assert found.json() == {"data": {"thread": None}}  # nothing was written
            for host in (f"localhost:{server.port}", f"127.0.0.1:{server.port}"):
                served = await client.post(
                    f"{server.url}/graphql", json={"query": "{ __typename }"}, headers={"Host": host}
                )
                assert served.json() == {"data": {"__typename": "Query"}}
            for path in ("/", "/graphql"):  # pages run nothing
                page = await client.get(f"{server.url}{path}", headers={"Host": evil, "Accept": "text/html"})
                assert page.status_code == 200
            # A persisted query's hash by GET runs a query without a query parameter: no page, refused
            # (it used to be served: any thread read through a query a local client had registered).
            text = "query($t: ID!) { thread(id: $t) { id } }"
            registered = await client.post(
                f"{server.url}/graphql",
                json={"query": text, "variables": {"t": "t"}, "extensions": persisted(text)},
            )
            assert registered.json() == {"data": {"thread": None}}
            params = {"extensions": json.dumps(persisted(text)), "variables": '{"t": "t"}'}
            hashed = await client.get(f"{server.url}/graphql", params=params, headers={"Host": evil})
            assert hashed.status_code == 403 and codes(hashed.json()) == ["FORBIDDEN"]
            assert (await client.get(f"{server.url}/graphql", params=params)).json() == registered.json()

        # The upgrade a rebound page sends: its own name as Host, and as Origin, so same-origin.
        def upgrade(host: str) -> bytes:
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.sendall(
                    f"GET /graphql HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\n"
                    "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: graphql-transport-ws\r\n"
                    f"Origin: http://{host}\r\n\r\n".encode()
                )
                return sock.recv(4096).split(b"\r\n", 1)[0]

        assert upgrade(evil) == b"HTTP/1.1 403 Forbidden"
        assert upgrade(f"localhost:{server.port}") == b"HTTP/1.1 101 Switching Protocols"
        ws_url = server.url.replace("http://", "ws://", 1) + "/graphql"
        async with websockets.connect(ws_url, subprotocols=["graphql-transport-ws"]) as ws:
            await ws.send(json.dumps({"type": "connection_init"}))
            assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "connection_ack"


# ------------------------------------------------------------------------------------------------ CORS
APP_ORIGIN, EVIL_ORIGIN = "http://app.example:3000", "https://evil.example"


def _preflight(url: str, origin: str) -> httpx.Response:
    return httpx.options(
        f"{url}/graphql",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
        timeout=10,
    )


async def _ws_refused(url: str, origin: str) -> int:
    """The HTTP status that refused a WebSocket handshake from this origin (0: it was accepted)."""
    try:
        async with websockets.connect(
            url.replace("http://", "ws://", 1) + "/graphql",
            subprotocols=["graphql-transport-ws"],
            origin=origin,
        ):
            return 0
    except websockets.InvalidStatus as exc:
        return exc.response.status_code


async def test_browser_apps_of_listed_origins_may_call_graphql(tmp_path: Path) -> None:
    """RECALLQL_CORS_ORIGINS: a frontend served from another origin may call /graphql (it had no CORS at
    all: such apps needed a proxy) and open its WebSocket; other origins still may not."""
    key = new_key()
    env = {
        "RECALLQL_AUTH": "required",
        "RECALLQL_API_KEYS": json.dumps([key_entry("web", key, resources=["r-cors"])]),
        "RECALLQL_CORS_ORIGINS": json.dumps([APP_ORIGIN]),
        "RECALLQL_EMBEDDER": "off",
    }
    with running_server(tmp_path / "data", env) as server:
        allowed = _preflight(server.url, APP_ORIGIN)
        assert allowed.status_code == 200, allowed.text
        assert allowed.headers["access-control-allow-origin"] == APP_ORIGIN
        assert {"authorization", "content-type"} <= {
            h.strip().lower() for h in allowed.headers["access-control-allow-headers"].split(",")
        }
        assert "access-control-allow-origin" not in _preflight(server.url, EVIL_ORIGIN).headers
        query = {"query": 'query { threads(resourceId: "r-cors") { total } }'}
        # A 401 reaches the page with its CORS headers, so the app can read it and ask for a token.
        refused = httpx.post(f"{server.url}/graphql", json=query, headers={"Origin": APP_ORIGIN}, timeout=10)
        assert (refused.status_code, refused.headers["access-control-allow-origin"]) == (401, APP_ORIGIN)
        answered = httpx.post(
            f"{server.url}/graphql",
            json=query,
            headers={"Origin": APP_ORIGIN, "Authorization": f"Bearer {key}"},
            timeout=10,
        )
        assert answered.json() == {"data": {"threads": {"total": 0}}}
        assert answered.headers["access-control-allow-origin"] == APP_ORIGIN
        assert "x-request-id" in answered.headers["access-control-expose-headers"].lower()
        other = httpx.post(
            f"{server.url}/graphql",
            json=query,
            headers={"Origin": EVIL_ORIGIN, "Authorization": f"Bearer {key}"},
            timeout=10,
        )
        assert "access-control-allow-origin" not in other.headers  # the browser keeps the answer from it
        assert await _ws_refused(server.url, APP_ORIGIN) == 0
        assert await _ws_refused(server.url, EVIL_ORIGIN) == 403


async def test_without_cors_origins_only_the_servers_own_pages_may_call_graphql(tmp_path: Path) -> None:
    with running_server(tmp_path / "data", {"RECALLQL_EMBEDDER": "off"}) as server:
        assert _preflight(server.url, APP_ORIGIN).status_code == 405
        answered = httpx.post(
            f"{server.url}/graphql",
            json={"query": "{ __typename }"},
            headers={"Origin": APP_ORIGIN},
            timeout=10,
        )
        assert answered.status_code == 200 and "access-control-allow-origin" not in answered.headers
        assert await _ws_refused(server.url, APP_ORIGIN) == 403
        assert await _ws_refused(server.url, server.url) == 0  # its own pages (GraphiQL, the explorer)


@pytest.mark.parametrize(
    ("origins", "said"),
    [
        (
            ["*"],
            "recallql: setting not valid: RECALLQL_CORS_ORIGINS may not be * while authentication is off",
        ),
        (["http://app.example/"], "is not an origin (scheme://host[:port], no path) or *"),
        (["app.example"], "is not an origin (scheme://host[:port], no path) or *"),
    ],
)
def test_cors_origins_that_would_open_too_much_or_match_nothing_are_refused(
    tmp_path: Path, origins: list[str], said: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "web.cli", "serve", "--port", str(free_port())],
        cwd=REPO,
        env={**os.environ, "RECALLQL_CORS_ORIGINS": json.dumps(origins), "RECALLQL_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr


async def test_the_expiry_timer_closes_no_earlier_than_the_wall_clock_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The event loop sleeps on the monotonic clock; a sleep can end a little before the wall clock
    reaches the expiry (0.2 ms early in one CI run, where a client saw the close before its `exp`)."""
    from web import limits

    expires = 1_800_000_000.0
    now = [expires - 4.0]
    # What the wall clock reads after each sleep: the first wakes up 0.2 ms early.
    after_sleeps = iter([expires - 0.0002, expires])
    slept: list[float] = []
    closed_at: list[float] = []

    def wall() -> float:
        return now[0]

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] = next(after_sleeps)

    class Socket:
        async def close(self, code: int, reason: str) -> None:
            closed_at.append(now[0])

    watcher = limits._CredentialExpiry()
    watcher.websocket = Socket()
    monkeypatch.setattr(limits.time, "time", wall)
    monkeypatch.setattr(limits.asyncio, "sleep", sleep)
    await watcher._close_at(expires)
    assert closed_at == [expires]
    assert slept == [4.0, pytest.approx(0.0002, abs=1e-6)]


async def test_clone_fields_never_reach_past_the_credential_and_batch(services: Services) -> None:
    """Thread.cloneHistory and clonedFrom stop at a source the credential may not see (a thread cloned
    from another resource's), Thread.clones of a resource not granted is FORBIDDEN, and a listing's
    clones are read in one batch."""
    threads = services.threads
    await threads.create(resource_id="r1", thread_id="src", principal=OPEN)
    for thread_id, resource_id, source in (
        ("mine", "r2", "src"),
        ("mine2", "r2", "mine"),
        ("b1", "r1", "src"),
    ):
        metadata = {"clone": {"sourceThreadId": source, "clonedAt": "2026-12-07T00:00:00.000Z"}}
        await threads.create(resource_id=resource_id, thread_id=thread_id, metadata=metadata, principal=OPEN)
    schema = build_schema()
    r2 = Principal("key:r2", frozenset({"r2"}))
    query = """{ a: thread(id: "mine2") { clonedFrom { id } cloneHistory { id } }
      b: thread(id: "mine") { isClone clonedFrom { id } cloneHistory { id } clones { id } } }"""
    result = await schema.execute(query, context_value=RequestContext(services=services, principal=r2))
    assert result.errors is None and result.data == {
        "a": {"clonedFrom": {"id": "mine"}, "cloneHistory": [{"id": "mine"}, {"id": "mine2"}]},
        "b": {
            "isClone": True,
            "clonedFrom": None,
            "cloneHistory": [{"id": "mine"}],
            "clones": [{"id": "mine2"}],
        },
    }
    result = await schema.execute(
        '{ thread(id: "mine") { clones(resourceId: "r1") { id } } }',
        context_value=RequestContext(services=services, principal=r2),
    )
    assert result.errors is not None and result.errors[0].extensions is not None
    assert result.errors[0].extensions["code"] == "FORBIDDEN" and "src" not in str(result.errors[0].message)
    # Admin: a listing's clones in one read; src's clones in both resources.
    context = RequestContext(services=services, principal=OPEN)
    result = await schema.execute(
        '{ threads(resourceId: "r2") { threads { id clones { id } } } }', context_value=context
    )
    assert result.errors is None and result.data is not None
    assert {t["id"]: [c["id"] for c in t["clones"]] for t in result.data["threads"]["threads"]} == {
        "mine": ["mine2"],
        "mine2": [],
    }
    assert context.clones.batches == 1
    result = await schema.execute(
        '{ thread(id: "src") { clones { id } other: clones(resourceId: "r2") { id } } }',
        context_value=RequestContext(services=services, principal=OPEN),
    )
    assert result.errors is None
    assert result.data == {"thread": {"clones": [{"id": "b1"}], "other": [{"id": "mine"}]}}


async def test_threads_without_a_resource_lists_only_the_credentials_resources(services: Services) -> None:
    await seed(services, threads={"a1": "a", "a2": "a", "b1": "b", "c1": "c"})
    schema = build_schema()
    query = "{ threads(orderBy: {field: CREATED_AT, direction: ASC}) { total threads { id } } }"

    async def listed(principal: Principal) -> tuple[int, list[str]]:
        result = await schema.execute(
            query, context_value=RequestContext(services=services, principal=principal)
        )
        assert result.errors is None and result.data is not None
        page = result.data["threads"]
        return page["total"], [t["id"] for t in page["threads"]]

    assert await listed(OPEN) == (4, ["a1", "a2", "b1", "c1"])
    assert await listed(Principal("key:ac", frozenset({"a", "c"}))) == (3, ["a1", "a2", "c1"])
    assert await listed(Principal("key:b", frozenset({"b"}))) == (1, ["b1"])
    assert await listed(NOBODY) == (0, [])
