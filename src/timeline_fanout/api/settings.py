"""The API's own settings (``FANOUT_API_*``), beside the stack's (cli/settings.py), which the
CLI reads to wire the backends. Every field's description is its entry in the configuration
reference; docs/http-api-security.md explains the limits and the token policy."""

from __future__ import annotations

from typing import Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MIN_SECRET_BYTES = 32


class ApiSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FANOUT_API_", extra="ignore")

    # Secrets are SecretStr: their repr is masked, so settings never print a key.
    jwt_secret: SecretStr | None = Field(None, description="HS256 secret for bearer tokens")
    jwt_public_key: SecretStr | None = Field(
        None, description="PEM public key for bearer tokens (RSA: RS256, EC P-256: ES256)"
    )
    jwt_audience: str | None = Field(
        None, description="when set, a token's aud must name it (tokens without aud refused)"
    )
    jwt_issuer: str | None = Field(
        None, description="when set, a token's iss must equal it (tokens without iss refused)"
    )
    private_lists: bool = Field(
        False,
        description="follower/following lists, author pages, the point query and /v1/stats need a "
        "valid token",
    )
    threads: int = Field(
        8,
        ge=1,
        le=64,
        description="threads per process running store and cache calls (each owns its "
        "connections); warm timeline reads do not use them",
    )
    retry_after_s: int = Field(
        2, ge=1, le=3600, description="Retry-After of a 503 (memcached or the store unreachable)"
    )
    max_following: int = Field(
        7500,
        ge=1,
        description="POST /v1/events refuses follows that would take a user past this many "
        "followed (Mastodon's limit): a home timeline read moves the reader's following list "
        "from memcached, so its size bounds what one read costs; counted against the store's "
        "kept counts, so follows not yet applied can pass it by what is in flight",
    )
    publish_timeout_s: float = Field(
        10.0, gt=0, le=300, description="POST /v1/events waits this long for the broker's acks"
    )
    page_memo_mb: int = Field(
        256,
        ge=0,
        le=65536,
        description="per process: rendered timeline pages kept to answer unchanged reads "
        "without walking them (each with the replies it was read from, ~7 KiB for a page of 50 "
        "posts; checked against the replies of every read; 0: none)",
    )
    ready_timeout_s: float = Field(
        2.0, gt=0, le=60, description="/readyz gives each dependency this long to answer"
    )
    jwt_max_lifetime_s: int = Field(
        86400,
        ge=60,
        le=366 * 86400,
        description="the longest a token may still be valid: a token whose exp is further "
        "from now than this is refused, as is one without exp",
    )
    max_header_bytes: int = Field(
        32768,
        ge=4096,
        le=1 << 20,
        description="a request's head (request line and headers) is at most this many bytes; "
        "a larger one is answered 431 and its connection closed, before it is all read",
    )
    max_headers: int = Field(
        100,
        ge=16,
        le=10000,
        description="a request has at most this many headers (431 beyond, before the app runs)",
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="a request head that has begun must be complete within this long "
        "(408 and the connection closed): a client sending its headers slowly holds nothing",
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        le=600,
        description="a request body must arrive within this long: POST /v1/events answers "
        "408, any other route's connection is closed a second later",
    )
    body_budget_mb: int = Field(
        256,
        ge=32,
        le=65536,
        description="per process: request bodies being received are held up to this many MiB "
        "in all; a body that would go beyond is refused with 503 and Retry-After",
    )
    limit_concurrency: int = Field(
        1024,
        ge=16,
        le=100000,
        description="per process: connections plus requests in progress; beyond it uvicorn "
        "answers 503 at once",
    )

    @field_validator("jwt_secret", "jwt_public_key", "jwt_audience", "jwt_issuer", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """``FANOUT_API_JWT_SECRET=`` (compose's ``${VAR:-}``) means unset, not an empty one."""
        return None if value == "" else value

    @field_validator("jwt_secret")
    @classmethod
    def _long_secret(cls, value: SecretStr | None) -> SecretStr | None:
        """RFC 7518 (3.2): an HS256 key has at least as many bits as the hash, 256. A shorter
        one is guessable offline from any token, and would let anyone mint tokens."""
        if value is not None and len(value.get_secret_value().encode()) < MIN_SECRET_BYTES:
            raise ValueError(
                f"FANOUT_API_JWT_SECRET must be at least {MIN_SECRET_BYTES} bytes (HS256 needs a "
                "256-bit key); generate one with: python -c 'import secrets; "
                "print(secrets.token_urlsafe(48))'"
            )
        return value

    @model_validator(mode="after")
    def _one_key(self) -> Self:
        if self.jwt_secret is not None and self.jwt_public_key is not None:
            raise ValueError("set FANOUT_API_JWT_SECRET or FANOUT_API_JWT_PUBLIC_KEY, not both")
        return self

    @property
    def auth_configured(self) -> bool:
        return self.jwt_secret is not None or self.jwt_public_key is not None
