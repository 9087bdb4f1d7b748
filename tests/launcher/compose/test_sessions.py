"""Which servers an HTTP client may hear of outside any call (:class:`Audience`), without a
launcher: its caller's ``access:`` rules and its endpoint's profile, taken at its handshake."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from fastmcp import FastMCP

from doc_processing_std_tools.launcher.calls.access import Access
from doc_processing_std_tools.launcher.calls.audit import Caller
from doc_processing_std_tools.launcher.calls.guards import CallGuards
from doc_processing_std_tools.launcher.compose.profile_gate import ProfileGate
from doc_processing_std_tools.launcher.compose.profiles import Profile
from doc_processing_std_tools.launcher.compose.sessions import Audience
from doc_processing_std_tools.launcher.config.access import AccessRule
from doc_processing_std_tools.launcher.transports.session_binding import PROFILE_SCOPE_KEY
from doc_processing_std_tools.seams.fastmcp_server import add_server_middleware
from helpers.compositions import Composed


def _mount(name: str, *tools: str) -> Any:
    return SimpleNamespace(name=name, tools=[SimpleNamespace(name=t) for t in tools])


def _handshake(profile: str | None) -> Any:
    """fastmcp's context of a client's ``notifications/initialized`` at *profile*'s endpoint."""
    scope = {PROFILE_SCOPE_KEY: profile} if profile else {}
    return SimpleNamespace(request_context=SimpleNamespace(request=SimpleNamespace(scope=scope)))


def _composition(guards: CallGuards | None) -> Any:
    mounts = [_mount("open", "open_read"), _mount("secret", "secret_wipe"), _mount("bare")]
    return Composed(mounts=mounts, root=FastMCP("t"), guards=guards)


def test_a_server_the_callers_access_denies_is_not_told() -> None:
    rules = [{"users": "alice", "servers": "open"}, {"users": "alice", "tools": "secret_wipe"}]
    guards = CallGuards(access=Access([AccessRule.model_validate(r) for r in rules]))
    guards.identify = lambda session, headers: Caller("alice", "s1", "c", {})
    told = Audience(_composition(guards)).of(_handshake(None), object())
    # (a rule for some of a server's tools does not let its caller see the server whole)
    assert told("open") and not told("secret") and not told("bare")


def test_a_server_the_endpoints_profile_hides_is_not_told() -> None:
    composition = _composition(None)
    profiles = {"small": Profile(name="small", exclude=("secret_*",)), "all": Profile(name="all")}
    add_server_middleware(composition.root, ProfileGate(composition, profiles, "all"))
    audience = Audience(composition)
    small = audience.of(_handshake("small"), object())
    assert small("open") and not small("secret")
    assert small("bare")  # (no tools: a profile does not hide it)
    default = audience.of(_handshake(None), object())  # (the launch's default profile)
    assert default("open") and default("secret")
