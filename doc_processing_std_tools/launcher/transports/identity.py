"""Who the request being served is for: the authenticated subject of the incoming sign-in.

The HTTP transport's auth sets it for each request it admits (the subject of a verified
token); everything that serves the request, down to a relayed call, reads it with
:func:`current_subject`. ``None``: no signed-in user (stdio, static tokens, auth off); the
launcher then acts as itself (its own upstream OAuth logins, ``dpt-launch login NAME``).
A context variable: each request's task sees its own value.
"""

from __future__ import annotations

from contextvars import ContextVar, Token

_SUBJECT: ContextVar[str | None] = ContextVar("dpt_subject", default=None)


def current_subject() -> str | None:
    """The signed-in user the current request serves, or None."""
    return _SUBJECT.get()


def set_subject(subject: str | None) -> Token[str | None]:
    """Serve the rest of this context as *subject*; :func:`reset_subject` with the token undoes it."""
    return _SUBJECT.set(subject)


def reset_subject(token: Token[str | None]) -> None:
    _SUBJECT.reset(token)
