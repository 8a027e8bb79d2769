"""Authentication: bearer tokens (static API keys or JWTs) to a resolvers.auth.Principal.

RECALLQL_AUTH decides whether it runs: "off", "required", or "auto" (the default: off when the server
binds a loopback host, required otherwise). When it is on, POST and GET /graphql requests carry
`Authorization: Bearer <token>` (a missing or bad one is a 401 before any GraphQL runs); WebSocket
clients send it in the graphql-transport-ws connection_init payload (`{"Authorization": "Bearer …"}`)
or in the upgrade request's header. /healthz, /readyz, /metrics, the explorer and the GraphiQL page
(GET /graphql without a query) stay open: they hold no memory.

Tokens:
- API keys (RECALLQL_API_KEYS, a JSON list): `{"name", "sha256", "resources": [...]}` or
  `{"name", "sha256", "admin": true}`. Only the SHA-256 of a key is configured; a presented token is
  hashed and compared with every configured digest in constant time (hmac.compare_digest).
  `recallql keys new` makes a key and its entry.
- JWTs (PyJWT): HS256 with RECALLQL_JWT_SECRET, RS256 with keys from RECALLQL_JWT_JWKS_FILE or
  RECALLQL_JWT_JWKS_URL; RECALLQL_JWT_ISSUER and RECALLQL_JWT_AUDIENCE are verified when set; the
  resources are the RECALLQL_JWT_RESOURCE_CLAIM claim (default `sub`; a string or a list of strings);
  RECALLQL_JWT_ADMIN_CLAIM names an optional boolean claim that makes the token an admin.

The principal travels in the ASGI scope (PRINCIPAL_KEY) to RecallQLGraphQL.get_context, which the
compiled read path uses as well; the services enforce what it may touch (resolvers/auth.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import logging
import re
import secrets
import time
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import jwt
import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from resolvers.auth import NOBODY, OPEN, Principal
from web.settings import Settings

log = logging.getLogger("recallql.auth")

PRINCIPAL_KEY = "recallql.principal"
KEY_PREFIX = "rql_"
OFF_WARNING = "authentication is off: every caller can read every resource"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
_JWT_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


# ---------------------------------------------------------------------------------------------- mode
def is_loopback(host: str) -> bool:
    """Whether a bind address only accepts connections from this machine (127.0.0.0/8, ::1,
    localhost)."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def auth_required(mode: str, host: str) -> bool:
    """RECALLQL_AUTH: "required" and "off" say it; "auto" is off only on a loopback host."""
    if mode == "required":
        return True
    if mode == "off":
        return False
    if mode != "auto":
        raise ValueError(f"RECALLQL_AUTH must be auto, required or off, not {mode!r}")
    return not is_loopback(host)


# ---------------------------------------------------------------------------------------------- errors
class Unauthenticated(Exception):
    """No usable credential: a 401 with a GraphQL-style error body and WWW-Authenticate: Bearer."""

    status = 401
    code = "UNAUTHENTICATED"

    def __init__(self, message: str, *, invalid_token: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.invalid_token = invalid_token

    def body(self) -> bytes:
        error = {"message": self.message, "extensions": {"code": self.code}}
        return orjson.dumps({"errors": [error]})

    def headers(self) -> list[tuple[bytes, bytes]]:
        challenge = 'Bearer realm="recallql"'
        if self.invalid_token:
            challenge += ', error="invalid_token"'
        return [(b"www-authenticate", challenge.encode())]


class ForeignHost(Unauthenticated):
    """A request to a server without authentication, bound to this machine only, under a name that is
    not this machine's: what a web page sends after pointing its own name at 127.0.0.1 (DNS
    rebinding). Its requests are same-origin for the browser, so without this check any site a user
    opened could read and write every resource."""

    status = 403
    code = "FORBIDDEN"

    def __init__(self, host: str) -> None:
        super().__init__(
            f"Host {host!r} is not this machine: without authentication the server answers only to "
            "localhost, 127.0.0.1 or [::1] (set RECALLQL_AUTH=required to serve other names)."
        )

    def headers(self) -> list[tuple[bytes, bytes]]:
        return []


def host_name(value: str) -> str:
    """The name in a Host header, without its port."""
    value = value.strip()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class AuthUnavailable(Unauthenticated):
    """The JWKS endpoint could not be reached: the server's problem, not the token's."""

    status = 503
    code = "SERVICE_UNAVAILABLE"

    def headers(self) -> list[tuple[bytes, bytes]]:
        return []


MISSING = "Authentication required: send an Authorization: Bearer <token> header."


# ---------------------------------------------------------------------------------------------- API keys
@dataclass(frozen=True, slots=True)
class ApiKey:
    name: str
    digest: bytes  # sha256(key)
    resources: frozenset[str] | None  # None: admin

    def principal(self) -> Principal:
        return Principal(name=f"key:{self.name}", resources=self.resources)


def hash_key(key: str) -> str:
    """What RECALLQL_API_KEYS stores for a key: the hex SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    """A fresh random API key (256 bits), recognisable by its prefix."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_entry(name: str, key: str, *, resources: Iterable[str] = (), admin: bool = False) -> dict[str, Any]:
    """The RECALLQL_API_KEYS entry of a key."""
    entry: dict[str, Any] = {"name": name, "sha256": hash_key(key)}
    if admin:
        entry["admin"] = True
    else:
        entry["resources"] = list(dict.fromkeys(resources))
    parse_api_keys([entry])  # the entry must be valid as configured
    return entry


def parse_api_keys(entries: Iterable[Mapping[str, Any]]) -> list[ApiKey]:
    """Validates RECALLQL_API_KEYS; a mistake stops the server at startup with the entry named."""
    keys: list[ApiKey] = []
    names: set[str] = set()
    digests: set[bytes] = set()
    for n, entry in enumerate(entries):
        where = f"RECALLQL_API_KEYS[{n}]"
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where} must be an object")
        unknown = set(entry) - {"name", "sha256", "resources", "admin"}
        if unknown:
            raise ValueError(f"{where} has unknown fields: {', '.join(sorted(unknown))}")
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where}.name must be a non-empty string")
        if name in names:
            raise ValueError(f"{where}.name {name!r} is used twice")
        digest_hex = entry.get("sha256")
        if not isinstance(digest_hex, str) or not _SHA256_HEX.fullmatch(digest_hex):
            raise ValueError(f"{where}.sha256 must be 64 hex digits (the SHA-256 of the key)")
        digest = bytes.fromhex(digest_hex)
        if digest in digests:
            raise ValueError(f"{where} ({name}): the same key is configured twice")
        admin = entry.get("admin", False)
        if not isinstance(admin, bool):
            raise ValueError(f"{where}.admin must be true or false")
        resources = entry.get("resources")
        if admin:
            if resources is not None:
                raise ValueError(f"{where} ({name}): an admin key takes no resources (it has them all)")
            granted = None
        else:
            if (
                not isinstance(resources, list)
                or not resources
                or not all(isinstance(r, str) and r for r in resources)
            ):
                raise ValueError(
                    f'{where} ({name}): resources must be a non-empty list of resource ids (or "admin": true)'
                )
            granted = frozenset(resources)
        names.add(name)
        digests.add(digest)
        keys.append(ApiKey(name, digest, granted))
    return keys


# ---------------------------------------------------------------------------------------------- JWT
class _JwksFile:
    """RS256 keys from a JWKS file, by kid. The file is checked (one stat) on every token and read
    again when it changed, so that adding a key, replacing one under the same kid and removing one
    (revoking it) all take effect without a restart."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._signature: tuple[int, int, int] | None = None
        self._refused: object = None  # the version that could not be read, warned about once
        self._keys: dict[str | None, Any] = {}
        self._load(startup=True)

    def _stat(self) -> tuple[int, int, int]:
        # mtime alone misses a rewrite within the file system's timestamp granularity; a different
        # size or inode (an atomic rename) still shows it.
        st = self.path.stat()
        return st.st_mtime_ns, st.st_size, st.st_ino

    def _load(self, signature: tuple[int, int, int] | None = None, *, startup: bool = False) -> None:
        try:
            signature = signature or self._stat()
            document = json.loads(self.path.read_text(encoding="utf-8"))
            jwks = jwt.PyJWKSet.from_dict(document) if document.get("keys") or startup else None
        except (OSError, ValueError, AttributeError, jwt.PyJWTError) as exc:
            raise ValueError(f"RECALLQL_JWT_JWKS_FILE {self.path}: {exc}") from exc
        keys = {k.key_id: k.key for k in jwks.keys if k.key_type == "RSA"} if jwks is not None else {}
        if not keys and startup:
            raise ValueError(f"RECALLQL_JWT_JWKS_FILE {self.path}: no RSA key")
        if not keys:
            log.warning("RECALLQL_JWT_JWKS_FILE %s holds no RSA key: every RS256 token is refused", self.path)
        self._keys, self._signature = keys, signature

    def _refresh(self) -> None:
        try:
            signature = self._stat()
        except OSError as exc:
            self._keep_old("unreadable", f"RECALLQL_JWT_JWKS_FILE {self.path}: {exc}")
            return
        if signature == self._signature or signature == self._refused:
            return
        try:
            self._load(signature)
        except ValueError as exc:
            # Most likely a writer caught halfway: its next change is read again.
            self._keep_old(signature, str(exc))

    def _keep_old(self, version: object, problem: str) -> None:
        if version != self._refused:  # once per version of the file, not once per token
            log.warning("%s (keeping the keys read before)", problem)
            self._refused = version

    def key(self, kid: str | None) -> Any:
        self._refresh()
        if len(self._keys) == 1 and (kid is None or None in self._keys):  # one key, unnamed on a side
            return next(iter(self._keys.values()))
        found = self._keys.get(kid)
        if found is None:
            raise Unauthenticated("Invalid token: no key for its kid in the JWKS.")
        return found


class _EndpointFault(Exception):
    """The JWKS endpoint answered, but with nothing usable (its cause says what)."""


class JwtVerifier:
    def __init__(self, settings: Settings) -> None:
        if settings.jwt_secret is not None and len(settings.jwt_secret.encode("utf-8")) < 32:
            # RFC 7518 §3.2: an HS256 key must be at least as long as the hash (256 bits).
            raise ValueError("RECALLQL_JWT_SECRET must be at least 32 bytes long (HS256)")
        self.secret = settings.jwt_secret
        self.jwks_file = _JwksFile(settings.jwt_jwks_file) if settings.jwt_jwks_file else None
        self.jwks_client = (
            jwt.PyJWKClient(settings.jwt_jwks_url, cache_keys=True, lifespan=300, timeout=10)
            if settings.jwt_jwks_url
            else None
        )
        self.issuer = settings.jwt_issuer
        self.audience = settings.jwt_audience
        self.resource_claim = settings.jwt_resource_claim
        self.admin_claim = settings.jwt_admin_claim
        self.leeway = settings.jwt_leeway
        self.max_lifetime = settings.jwt_max_lifetime

    @property
    def configured(self) -> bool:
        return bool(self.secret or self.jwks_file or self.jwks_client)

    async def principal(self, token: str) -> Principal:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"Invalid token: {exc}") from None
        algorithm = header.get("alg")
        if algorithm == "HS256" and self.secret:
            key: Any = self.secret
        elif algorithm == "RS256" and self.jwks_file is not None:
            key = self.jwks_file.key(header.get("kid"))
        elif algorithm == "RS256" and self.jwks_client is not None:
            key = await self._fetch_key(header.get("kid"))
        else:
            raise Unauthenticated(f"Invalid token: algorithm {algorithm!r} is not accepted.")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp"] if self.max_lifetime is not None else []},
            )
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"Invalid token: {exc}") from None
        exp = claims.get("exp")
        if "exp" in claims and (isinstance(exp, bool) or not isinstance(exp, int | float)):
            # PyJWT checks int(exp), so "1700000000" passes; a WebSocket's end is read from the claim
            # itself, and RFC 7519 makes exp a number (NumericDate): refused, not honoured as text.
            raise Unauthenticated("Invalid token: its exp claim must be a number (NumericDate).")
        principal = self._principal(claims)
        if self.max_lifetime is not None:
            # The leeway allows an issuer's clock that far ahead of ours, as it does on exp itself.
            ends = _expiry(claims.get("exp"), 0.0)
            if ends is None or ends - time.time() > self.max_lifetime + self.leeway:
                raise Unauthenticated(
                    f"Invalid token: it expires more than {self.max_lifetime:g} seconds from now, "
                    "longer than this server accepts (RECALLQL_JWT_MAX_LIFETIME)."
                )
        return principal

    async def _fetch_key(self, kid: str | None) -> Any:
        assert self.jwks_client is not None
        client = self.jwks_client

        def signing_key() -> Any:
            try:
                client.get_signing_keys()  # the endpoint's set (cached): what is wrong with it is ours
            except (jwt.PyJWTError, ValueError) as exc:
                raise _EndpointFault(exc) from exc
            try:
                return client.get_signing_key(kid or "").key  # refreshed once for an unknown kid
            except jwt.PyJWKClientConnectionError:
                raise
            except jwt.PyJWKClientError as exc:
                # Only "no key for this kid" is the token's fault; PyJWT tells it from a refresh that
                # brought back nothing usable by its wording alone.
                if str(exc).startswith("Unable to find a signing key"):
                    raise
                raise _EndpointFault(exc) from exc
            except (jwt.PyJWKSetError, ValueError) as exc:  # the refresh's answer, not the token
                raise _EndpointFault(exc) from exc

        try:
            return await asyncio.to_thread(signing_key)
        except (_EndpointFault, jwt.PyJWKClientConnectionError, ValueError) as exc:
            # Unreachable, not JSON (an HTML error page), or no usable key: no token could be checked,
            # so the client is told to try again (503), not that its token is bad (401).
            cause = exc.__cause__ if isinstance(exc, _EndpointFault) else exc
            log.warning("JWKS endpoint %s unusable: %r", client.uri, cause)
            raise AuthUnavailable("The token's signing keys could not be fetched; try again.") from None
        except jwt.PyJWTError as exc:  # no key for the token's kid, after a refresh
            raise Unauthenticated(f"Invalid token: {exc}") from None

    def _principal(self, claims: dict[str, Any]) -> Principal:
        subject = claims.get("sub")
        name = f"jwt:{subject}" if isinstance(subject, str) and subject else "jwt"
        # A WebSocket outlives the check at connection_init: it is closed at this time (web/limits.py).
        expires_at = _expiry(claims.get("exp"), self.leeway)
        if self.admin_claim and claims.get(self.admin_claim) is True:
            return Principal(name=name, resources=None, expires_at=expires_at)
        value = claims.get(self.resource_claim)
        if isinstance(value, str) and value:
            return Principal(name=name, resources=frozenset({value}), expires_at=expires_at)
        if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
            return Principal(name=name, resources=frozenset(value), expires_at=expires_at)
        raise Unauthenticated(
            f"Invalid token: its {self.resource_claim!r} claim must be a resource id or a list of them."
        )


def _expiry(exp: float | None, leeway: float) -> float | None:
    """When a token's `exp` (a number: JwtVerifier refuses any other) ends it, leeway included; None
    without one, or beyond what a double holds (10**400 is a valid JSON integer): never, in practice."""
    if exp is None:
        return None
    try:
        return float(exp) + leeway
    except OverflowError:
        return None


# ---------------------------------------------------------------------------------------------- authenticator
class Authenticator:
    """Turns an Authorization value into a Principal (OPEN when authentication is off)."""

    def __init__(self, settings: Settings) -> None:
        self.mode = settings.auth
        self.host = settings.host
        self.enabled = auth_required(settings.auth, settings.host)
        # Off on a loopback bind: only this machine's names may reach it (see ForeignHost).
        self.loopback_names_only = not self.enabled and is_loopback(settings.host)
        self.keys = parse_api_keys(settings.api_keys)
        self.jwt = JwtVerifier(settings)
        if "*" in settings.cors_origins and not self.enabled:
            # Any site a user visits could then read and write every resource of this server.
            raise ValueError("RECALLQL_CORS_ORIGINS may not be * while authentication is off")

    @property
    def configured(self) -> bool:
        return bool(self.keys) or self.jwt.configured

    @property
    def default_principal(self) -> Principal:
        """Who a request without a checked credential is: everyone when off, no one when on."""
        return NOBODY if self.enabled else OPEN

    def log_startup(self) -> None:
        if not self.enabled:
            log.warning("%s (RECALLQL_AUTH=%s, host %s)", OFF_WARNING, self.mode, self.host)
        elif not self.configured:
            log.error(
                "authentication is required (RECALLQL_AUTH=%s, host %s) but neither RECALLQL_API_KEYS nor "
                "a RECALLQL_JWT_* key is configured: every GraphQL request will be refused",
                self.mode,
                self.host,
            )
        else:
            kinds = [f"{len(self.keys)} API key(s)"] if self.keys else []
            if self.jwt.configured:
                kinds.append("JWT")
            log.info("authentication required: %s", ", ".join(kinds))

    async def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an `Authorization` value; raises Unauthenticated."""
        if not self.enabled:
            return OPEN
        if authorization is None or not authorization.strip():
            raise Unauthenticated(MISSING, invalid_token=False)
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("Invalid Authorization header: expected `Bearer <token>`.")
        key = self._api_key(token)
        if key is not None:
            return key.principal()
        if self.jwt.configured and _JWT_SHAPE.fullmatch(token):
            return await self.jwt.principal(token)
        raise Unauthenticated("Invalid token.")

    def _api_key(self, token: str) -> ApiKey | None:
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        found = None
        for key in self.keys:  # every digest is compared: the time does not depend on which matched
            if hmac.compare_digest(digest, key.digest):
                found = key
        return found


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


class BearerAuth:
    """ASGI middleware in front of /graphql: authenticates every HTTP request that can run an operation
    and puts the principal in the scope, 401 (or 503) before anything else runs; refuses foreign Host
    names over HTTP and WebSocket while authentication is off (ForeignHost). A WebSocket's credential
    is checked by the GraphQL app itself (websocket_principal, on_connect)."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator) -> None:
        self.app = app
        self.authenticator = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        foreign = self._foreign_host(scope)
        if foreign is not None:
            if scope["type"] == "websocket":  # refused before the upgrade: an HTTP 403
                await send({"type": "websocket.close", "code": 4403})
            else:
                await _reject(send, ForeignHost(foreign))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.authenticator.enabled and not _is_ide_page(scope):
            try:
                principal = await self.authenticator.authenticate(header(scope, b"authorization"))
            except Unauthenticated as exc:
                await _reject(send, exc)
                return
        else:
            principal = self.authenticator.default_principal
        scope[PRINCIPAL_KEY] = principal
        await self.app(scope, receive, send)

    def _foreign_host(self, scope: Scope) -> str | None:
        """The Host of a request that may not reach this server (see ForeignHost), else None. The
        GraphiQL page runs nothing, so it loads under any name."""
        if not self.authenticator.loopback_names_only or scope["type"] not in ("http", "websocket"):
            return None
        host = header(scope, b"host")
        if host is None or is_loopback(host_name(host)):
            return None
        return None if scope["type"] == "http" and _is_ide_page(scope) else host


# What a GET may carry of a GraphQL request. A persisted query's hash (extensions) runs an operation
# without a query parameter: a GET with any of these is a request, authenticated and Host-checked.
_REQUEST_PARAMETERS = ("query", "extensions", "variables", "operationName")


def carries_request(params: Container[str]) -> bool:
    """Whether a GET's query parameters hold any part of a GraphQL request."""
    return any(name in params for name in _REQUEST_PARAMETERS)


def _is_ide_page(scope: Scope) -> bool:
    """A GET that carries no GraphQL request: the GraphiQL page (or an error); no operation can run."""
    if scope.get("method") != "GET":
        return False
    return not carries_request(
        parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    )


async def _reject(send: Send, exc: Unauthenticated) -> None:
    body = exc.body()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *exc.headers(),
    ]
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# ---------------------------------------------------------------------------------------------- websockets
async def websocket_principal(authenticator: Authenticator, scope: Scope) -> Principal:
    """The principal of a WebSocket connection from its upgrade request's Authorization header; NOBODY
    when there is none or it is not valid (connection_init may still bring a token: `on_connect`)."""
    if not authenticator.enabled:
        return OPEN
    value = header(scope, b"authorization")
    if value is None:
        return NOBODY
    try:
        return await authenticator.authenticate(value)
    except Unauthenticated:
        return NOBODY


async def on_connect(authenticator: Authenticator, context: Any) -> None:
    """graphql-transport-ws connection_init: a token in the payload (`Authorization`) decides;
    without one, the upgrade header's principal must be there. Raises Unauthenticated to reject."""
    if not authenticator.enabled:
        return
    params = getattr(context, "connection_params", None) or {}
    token = None
    for name in ("Authorization", "authorization"):
        if isinstance(params.get(name), str):
            token = params[name]
            break
    if token is not None:
        context.principal = await authenticator.authenticate(token)
    elif context.principal is NOBODY:
        raise Unauthenticated(
            'Authentication required: send {"Authorization": "Bearer <token>"} in connection_init.',
            invalid_token=False,
        )
