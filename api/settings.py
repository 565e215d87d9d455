"""The API's own settings (``FANOUT_API_*``), beside the stack's (fanout/settings.py), which the
CLI reads to wire the backends. docs/configuration.md is generated from the fields."""

from __future__ import annotations

from typing import Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


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
        description="follower/following lists, the point query and /v1/stats need a valid token",
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

    @field_validator("jwt_secret", "jwt_public_key", "jwt_audience", "jwt_issuer", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """``FANOUT_API_JWT_SECRET=`` (compose's ``${VAR:-}``) means unset, not an empty one."""
        return None if value == "" else value

    @model_validator(mode="after")
    def _one_key(self) -> Self:
        if self.jwt_secret is not None and self.jwt_public_key is not None:
            raise ValueError("set FANOUT_API_JWT_SECRET or FANOUT_API_JWT_PUBLIC_KEY, not both")
        return self

    @property
    def auth_configured(self) -> bool:
        return self.jwt_secret is not None or self.jwt_public_key is not None
