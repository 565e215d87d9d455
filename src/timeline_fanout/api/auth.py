"""Bearer tokens (JWT, checked with PyJWT) and who may do what.

Keys come from settings: an HS256 secret (at least 32 bytes, api/settings.py), or a PEM public
key whose type picks the one algorithm accepted (RSA: RS256, EC P-256: ES256); a token signed
any other way, ``none`` included, is refused. Claims: ``sub`` (the user id), ``scope``
(space-separated) and ``exp``, required: a token without one, or whose ``exp`` is further from
now than ``FANOUT_API_JWT_MAX_LIFETIME_S``, is refused, so no token is good forever and a
leaked one is good for a bounded time.

Rules: a home timeline is served to its owner or to a token with ``fanout:read-all``; follower
and following lists are public unless ``FANOUT_API_PRIVATE_LISTS`` (then any valid token);
``POST /v1/events`` needs ``fanout:publish``, and such a token may publish only events whose
actor (the follower, the author of a post or of a deleted post, the removed user) is its
``sub``, unless it also has ``fanout:publish-all`` (an app's backend publishing for its users):
so a user deletes only their own posts. Without a key configured the API is open (``fanout
serve`` then refuses non-loopback addresses).

Tokens never reach a log or a response: nothing here formats one, and PyJWT's errors do not
carry the token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from starlette.requests import Request

from timeline_fanout.api.problems import Problem
from timeline_fanout.api.settings import ApiSettings
from timeline_fanout.schemas import (
    AnyEvent,
    FanoutTask,
    Follow,
    Post,
    PostDeleted,
    Unfollow,
    UserRemoved,
)

READ_ALL = "fanout:read-all"
PUBLISH = "fanout:publish"
PUBLISH_ALL = "fanout:publish-all"


class AuthConfigError(ValueError):
    """The configured key cannot verify anything (not PEM, an unsupported key type)."""


@dataclass(frozen=True, slots=True)
class Principal:
    sub: str
    scopes: frozenset[str]


class TokenVerifier:
    def __init__(
        self,
        key: str | rsa.RSAPublicKey | ec.EllipticCurvePublicKey,
        algorithm: str,
        max_lifetime_s: int,
        audience: str | None = None,
        issuer: str | None = None,
    ) -> None:
        """``audience``/``issuer``: when set, tokens must carry that ``aud``/``iss`` — what
        keeps a token minted by a shared issuer for another service from being accepted here.
        ``exp`` is required, checked, and at most ``max_lifetime_s`` from now."""
        self._key = key
        self.algorithm = algorithm
        self.max_lifetime_s = max_lifetime_s
        self.audience = audience
        self.issuer = issuer
        self._required = [
            "sub",
            "exp",
            *(["aud"] if audience else []),
            *(["iss"] if issuer else []),
        ]

    @classmethod
    def from_settings(cls, settings: ApiSettings) -> TokenVerifier | None:
        claims: dict[str, Any] = {
            "max_lifetime_s": settings.jwt_max_lifetime_s,
            "audience": settings.jwt_audience,
            "issuer": settings.jwt_issuer,
        }
        if settings.jwt_secret is not None:
            return cls(settings.jwt_secret.get_secret_value(), "HS256", **claims)
        if settings.jwt_public_key is None:
            return None
        try:
            key = load_pem_public_key(settings.jwt_public_key.get_secret_value().encode())
        except ValueError:
            raise AuthConfigError("FANOUT_API_JWT_PUBLIC_KEY is not a PEM public key") from None
        if isinstance(key, rsa.RSAPublicKey):
            return cls(key, "RS256", **claims)
        if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
            return cls(key, "ES256", **claims)
        raise AuthConfigError("FANOUT_API_JWT_PUBLIC_KEY must be an RSA or EC P-256 public key")

    def verify(self, token: str) -> Principal:
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=[self.algorithm],
                audience=self.audience,
                issuer=self.issuer,
                options={"require": self._required},
            )
        except jwt.PyJWTError as exc:
            raise unauthorized(f"invalid token: {exc}", "invalid_token") from None
        # PyJWT checks a numeric string as the number it spells; the claim must be a number.
        exp = claims["exp"]
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise unauthorized("invalid token: exp must be a number", "invalid_token")
        if exp > time.time() + self.max_lifetime_s:
            raise unauthorized(
                f"invalid token: exp is more than {self.max_lifetime_s} s away "
                "(FANOUT_API_JWT_MAX_LIFETIME_S)",
                "invalid_token",
            )
        sub, scope = claims["sub"], claims.get("scope", "")
        if not isinstance(sub, str) or not isinstance(scope, str):
            raise unauthorized("invalid token: sub and scope must be strings", "invalid_token")
        return Principal(sub, frozenset(s for s in scope.split(" ") if s))  # RFC 6749: spaces only


def unauthorized(detail: str, error: str | None = None) -> Problem:
    challenge = 'Bearer realm="fanout"' + (f', error="{error}"' if error else "")
    return Problem(
        401, "unauthorized", "Unauthorized", detail, headers={"WWW-Authenticate": challenge}
    )


def forbidden(detail: str, extra: dict[str, object] | None = None) -> Problem:
    return Problem(403, "forbidden", "Forbidden", detail, extra=extra or {})


def actor(event: AnyEvent) -> str:
    """Whose action an event is: the one user a user token may publish for."""
    match event:
        case Follow() | Unfollow():
            return event.follower
        case Post() | PostDeleted() | FanoutTask():
            return event.author
        case UserRemoved():
            return event.user


class Guard:
    """The rules above, per request. With no verifier every check passes (open mode)."""

    def __init__(self, verifier: TokenVerifier | None, private_lists: bool) -> None:
        self.verifier = verifier
        self.private_lists = private_lists

    def principal(self, request: Request) -> Principal | None:
        """The caller, or None in open mode; 401 when a token is needed and missing or bad."""
        if self.verifier is None:
            return None
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized("a bearer token is required (Authorization: Bearer <JWT>)")
        return self.verifier.verify(token.strip())

    def read_timeline(self, request: Request, user: str) -> None:
        who = self.principal(request)
        if who is not None and who.sub != user and READ_ALL not in who.scopes:
            raise forbidden(f"a home timeline is served to its owner or to scope {READ_ALL}")

    def read_lists(self, request: Request) -> None:
        if self.private_lists:
            self.principal(request)

    def publisher(self, request: Request) -> Principal | None:
        """Checked before the body is read: who publishes, with scope ``fanout:publish``."""
        who = self.principal(request)
        if who is not None and PUBLISH not in who.scopes:
            raise forbidden(f"publishing needs scope {PUBLISH}")
        return who

    @staticmethod
    def publish_for(who: Principal | None, events: list[AnyEvent]) -> None:
        """Each event's actor is the token's ``sub``, and its time is the server's, unless the
        token has ``fanout:publish-all``. The time is part of every edge's position (greatest
        wins), so a user choosing it could date a follow after another user's later removal,
        or pin a post above everyone's newer ones."""
        if who is None or PUBLISH_ALL in who.scopes:
            return
        foreign = [i for i, e in enumerate(events) if actor(e) != who.sub]
        if foreign:
            raise forbidden(
                f"without scope {PUBLISH_ALL} a token publishes only events whose actor (the "
                f"follower, the author of a post or of a deleted post, the removed user) is its "
                f"sub; events {foreign[:10]} act for other users",
                {"indexes": foreign},
            )
        dated = [i for i, e in enumerate(events) if e.ts is not None]
        if dated:
            raise forbidden(
                f"without scope {PUBLISH_ALL} a token cannot set ts (the server stamps it); "
                f"events {dated[:10]} carry one",
                {"indexes": dated},
            )
