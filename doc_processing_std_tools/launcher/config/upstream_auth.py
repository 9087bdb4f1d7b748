"""``auth:`` of a ``url:`` server: how the launcher signs in to it (docs/auth.md)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator

from .model_base import StrictModel


class OAuthSettings(StrictModel):
    """A ``url:`` server's OAuth login (``auth: oauth``): tokens come from ``dpt-launch login``.

    Without ``client_id`` the launcher registers itself with the authorization server
    (dynamic client registration); with one, that client is used (register the redirect URI
    ``http://127.0.0.1:PORT/callback`` with it and set ``callback_port``)."""

    client_id: str | None = Field(None, min_length=1)
    client_secret: SecretStr | None = None
    scopes: list[str] = Field(default_factory=list)
    callback_port: int | None = Field(None, ge=1, le=65535)

    @field_validator("scopes", mode="before")
    @classmethod
    def _space_separated(cls, value: Any) -> Any:
        return value.split() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _secret_needs_id(self) -> OAuthSettings:
        if self.client_secret is not None and self.client_id is None:
            raise ValueError("'client_secret' needs the 'client_id' it belongs to")
        return self


class UpstreamAuth(StrictModel):
    """How the launcher signs in to a ``url:`` server: ``auth: oauth`` or ``auth: {oauth: {...}}``."""

    oauth: OAuthSettings

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value.strip().lower() == "oauth":
                return {"oauth": {}}
            raise ValueError(f"{value[:40]!r} is not a known auth; write auth: oauth")
        if isinstance(value, dict) and value.get("oauth") is None and "oauth" in value:
            return {**value, "oauth": {}}
        return value
