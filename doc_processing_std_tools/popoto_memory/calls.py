"""One tool call: our refusals, popoto's ``dispatch()``, and what its answer may hide.

Where a call runs: with the store on this machine (embedded, or a loopback url) and
the background start done, on the event loop, as popoto's own ``popoto-memory mcp``
runs it (a few milliseconds; no thread hop). Otherwise, and for whatever may be slow
(waiting for the start, checking a backend that may be down, starting it again,
``memory_status``'s full count), in a worker thread.

popoto's ``dispatch()`` returns a dict; :func:`dispatch` is the one place that reads
it, and everything here passes :class:`CallResult` values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio

from .. import locking
from ..shared import workspace
from ..shared.client_text import QUOTE_LIMIT, bounded, quote
from ..shared.reply_bounds import DEFAULT_BOUNDS, NOTE_ROOM, ReplyBounds
from ..telemetry import store_failed
from .runtime import START_TIMEOUT, PopotoUnavailable, Runtime, Scope
from .settings import scope_of_root

# What reaches popoto's memory_save is bounded: popoto's never-record scan runs a regex
# (its URL-userinfo detector) whose time grows with the square of each unbroken run of
# characters, in this process, holding the GIL. Measured on a 2-core machine, a whole
# memory_save: one 4,000-character run 90-160 ms, 8,000: 0.56 s, 16,000: 1.5 s, 100 KB: 31 s;
# at these caps the worst case (10 runs of 2,000 in 20,000 characters) is about 0.3 s.
MAX_SAVE_CHARS = 20_000
MAX_SAVE_RUN = 2_000  # the longest run of characters without whitespace
WRITE_TOOLS = frozenset({"memory_save", "memory_feedback"})
READ_ONLY_TOOLS = frozenset({"memory_search", "memory_status"})
# popoto answers an unreachable backend to these as if nothing were found: checked by a ping
CHECKED_TOOLS = frozenset({"memory_search", "memory_save", "memory_feedback"})
THREAD_TOOLS = frozenset({"memory_status"})  # slow by nature (counts every record)


@dataclass(frozen=True, slots=True)
class CallResult:
    """What a tool call answers: its text, and whether it is an error."""

    text: str
    is_error: bool = False


def dispatch(
    name: str, arguments: dict[str, Any], service: Any, bounds: ReplyBounds = DEFAULT_BOUNDS
) -> tuple[CallResult, bool]:
    """popoto's ``dispatch()`` -> (its answer, whether that answer may hide an outage).

    An error, or a search that found nothing, is also what popoto answers when its
    backend is down; only those pay for a ping, successful calls do not. A search's answer
    is cut to *bounds* (:func:`bounded_search`).
    """
    # (popoto: optional, 0.55 s; imported by then, see runtime.import_popoto)
    from popoto.integrations.mcp_server import dispatch as popoto_dispatch

    raw = popoto_dispatch(name, arguments, service)
    is_error = bool(raw["is_error"])
    text = briefly_quoted(raw["text"], arguments) if is_error else raw["text"]
    if name == "memory_search" and not is_error:
        text = bounded_search(text, (raw.get("structured") or {}).get("results") or [], bounds)
    result = CallResult(text, is_error)
    suspect = name in CHECKED_TOOLS and (
        result.is_error
        or (name == "memory_search" and not (raw.get("structured") or {}).get("results"))
    )
    return result, suspect


def bounded_search(text: str, results: list[dict[str, Any]], bounds: ReplyBounds) -> str:
    """popoto's search answer cut to the reply caps, with a last line saying how many more.

    Its ``limit`` argument is the caller's (frozen schema, no paging): what passes on is cut
    at whole results, popoto's lines made again from its structured results (one line per
    result, a result longer than a whole reply cut short). Should they not give its text
    back (another popoto), the text is cut at the character cap.
    """
    if len(text) <= bounds.chars and len(results) <= bounds.entries:
        return text
    how = "ask with a more specific query (or a smaller limit)"
    header = f"{len(results)} memory result(s):"
    lines = [f"- {item.get('content')}  [key: {item.get('key')}]" for item in results]
    if "\n".join([header, *lines]) != text:
        return (
            f"{text[: bounds.chars - NOTE_ROOM]}\n[the answer was {len(text):,} characters, "
            f"cut here: {bounds.stops_at()}; {how}]"
        )
    shown = bounds.take(lines, used=len(header) + 1)
    if not shown:  # the first result alone is longer than a reply
        first = results[0]
        room = bounds.chars - NOTE_ROOM - len(header) - len(str(first.get("key"))) - 100
        shown = [f"- {quote(str(first.get('content')), room)}  [key: {first.get('key')}]"]
    return "\n".join([header, *shown, bounds.note(len(lines) - len(shown), "results", how)])


def briefly_quoted(text: str, arguments: dict[str, Any]) -> str:
    """popoto's error *text* with each long argument it repeats cut to ``QUOTE_LIMIT``
    (``No memory found for key '<2 MB key>'`` would send the key back whole)."""
    for value in arguments.values():
        if isinstance(value, str) and len(value) > QUOTE_LIMIT and value in text:
            text = text.replace(value, quote(value))
    return bounded(text)


async def session_scope(runtime: Runtime) -> Scope | CallResult:
    """The scope of the call running now: an agent_id set in the settings or the environment,
    else the name of this session's first client root, else the runtime's default (the project
    working directory's name, else the per-user one). A refusal when the client declared roots
    but did not list them: guessing would file memories under another project."""
    if not runtime.resolved.agent_follows_roots:
        return runtime.default_scope
    # (here, not at the top: importing the package must not load fastmcp, 0.25 s)
    from fastmcp.server.dependencies import get_context

    try:
        context = get_context()
    except RuntimeError:  # no request (an in-process caller): no roots to follow
        return runtime.default_scope
    try:
        roots = await workspace.client_roots(context)
    except workspace.ClientRootsError as exc:
        return CallResult(
            f"popoto-memory cannot tell this session's scope: {exc}; set 'agent_id' in the "
            "popoto-memory settings to use one scope for every client",
            True,
        )
    found = scope_of_root(roots[0]) if roots else None
    return Scope(*found) if found else runtime.default_scope


def prepare(
    runtime: Runtime, name: str, arguments: dict[str, Any], scope: Scope
) -> tuple[CallResult | None, Any]:
    """(our refusal, None) for a call refused before popoto, else (None, a new popoto service),
    or (the error, None) when none can be made."""
    early = refusal(runtime, name, arguments)
    if early is not None:
        return early, None
    try:
        return None, runtime.new_service(scope)
    except Exception as exc:  # same wording as dispatch(service=None)
        return CallResult(f"{name} failed: {type(exc).__name__}: {exc}", True), None


async def call(runtime: Runtime, name: str, arguments: dict[str, Any]) -> CallResult:
    """Run one call from the event loop (see the module docstring for where it runs)."""
    scope = await session_scope(runtime)
    if isinstance(scope, CallResult):
        return scope
    if not (runtime.local and runtime.ready) or name in THREAD_TOOLS:
        return await anyio.to_thread.run_sync(call_in_thread, runtime, name, arguments, scope)
    answer, service = prepare(runtime, name, arguments, scope)
    if answer is not None:
        return answer
    if name in WRITE_TOOLS:
        async with locking.hold_async_unless_held():
            result, suspect = dispatch(name, arguments, service)
    else:
        result, suspect = dispatch(name, arguments, service, runtime.resolved.reply_bounds)
    if not suspect:
        return result
    return await anyio.to_thread.run_sync(
        lambda: follow_up(runtime, name, arguments, scope, service, result, retry=True)
    )


def call_in_thread(
    runtime: Runtime,
    name: str,
    arguments: dict[str, Any],
    scope: Scope | None = None,
    *,
    retry: bool = True,
) -> CallResult:
    """Run one call in a worker thread, waiting for the background start if needed."""
    if runtime.started and not runtime.ready and not runtime.wait_ready():
        return CallResult(
            f"{name} failed: popoto-memory is still starting after {START_TIMEOUT:g} s; "
            "try again in a moment.",
            True,
        )
    scope = scope or runtime.default_scope
    answer, service = prepare(runtime, name, arguments, scope)
    if answer is not None:
        return answer
    if name in WRITE_TOOLS:
        result, suspect = locking.run_exclusive(dispatch, name, arguments, service)
    else:
        result, suspect = dispatch(name, arguments, service, runtime.resolved.reply_bounds)
    if suspect:
        return follow_up(runtime, name, arguments, scope, service, result, retry=retry)
    return with_status_lines(runtime, name, result, scope)


def refusal(runtime: Runtime, name: str, arguments: dict[str, Any]) -> CallResult | None:
    """The answer when the call must not reach popoto (no backend, content too large), or None."""
    if runtime.start_error is not None:
        store_failed()
        return with_status_lines(
            runtime, name, CallResult(runtime.unavailable(runtime.start_error), True), None
        )
    if not runtime.started or runtime.config is None:
        return CallResult(f"{name} failed: the popoto-memory server is not running.", True)
    if name == "memory_save":
        why = oversized_save(arguments.get("content"))
        if why is not None:
            return CallResult(why, True)
    return None


def follow_up(
    runtime: Runtime,
    name: str,
    arguments: dict[str, Any],
    scope: Scope,
    service: Any,
    result: CallResult,
    *,
    retry: bool,
) -> CallResult:
    """Worker thread: what an error or an empty search really means, said plainly.

    A save popoto's privacy filter dropped says so; an unreachable backend is an
    error naming it and the fix (the embedded one is started again and the call
    retried once: nothing was written while it was down).
    """
    if name == "memory_save" and result.is_error:
        dropped = privacy_refusal(service, arguments.get("content"))
        if dropped is not None:
            return CallResult(dropped, True)
    try:
        service.ping()
    except Exception as exc:
        store_failed()
        if runtime.embedded is None or not retry:
            return CallResult(runtime.unavailable(exc), True)
        try:
            runtime.recover()
        except PopotoUnavailable as why:
            return CallResult(runtime.unavailable(why), True)
        return call_in_thread(runtime, name, arguments, scope, retry=False)
    return with_status_lines(runtime, name, result, scope)


def with_status_lines(
    runtime: Runtime, name: str, result: CallResult, scope: Scope | None
) -> CallResult:
    """memory_status also names the store and where its scope comes from, and the fix when
    popoto finds it unavailable; where no agent_id is set, the first search that finds nothing
    in a scope says where that scope comes from (a different client root is a different scope)."""
    if name == "memory_search" and scope is not None and not result.is_error:
        if not runtime.resolved.agent_follows_roots:
            return result  # the user chose it
        if result.text.startswith("No memories matched") and scope.agent_id not in runtime.told:
            runtime.told.add(scope.agent_id)
            return CallResult(f"{result.text} {scope_note(scope)}", result.is_error)
        return result
    if name != "memory_status":
        return result
    extra = [f"store: {runtime.backend_label()}"]
    if scope is not None:
        extra.append(f"agent_id from: {scope.source}")
    if result.is_error and runtime.start_error is None:
        extra.append(f"fix: {runtime.fix()}")
    return CallResult(result.text.rstrip() + "\n" + "\n".join(extra), result.is_error)


def scope_note(scope: Scope) -> str:
    """Where a scope comes from, and how to choose another, for the user."""
    return (
        f"(Scope {scope.agent_id!r} is from {scope.source}; set 'agent_id' in the popoto-memory "
        "settings to choose one.)"
    )


def oversized_save(content: Any) -> str | None:
    """Why *content* is too large for memory_save (see MAX_SAVE_*), or None.

    Non-strings pass through: popoto answers those with its own message.
    """
    if not isinstance(content, str):
        return None
    if len(content) > MAX_SAVE_CHARS:
        return (
            f"memory_save 'content' is {len(content):,} characters; the limit is "
            f"{MAX_SAVE_CHARS:,}. Save a shorter fact (memory-tools' write_memory keeps "
            "whole documents). Nothing was saved."
        )
    if len(content) <= MAX_SAVE_RUN:
        return None  # no run can be longer than the whole
    longest = max(map(len, content.split()), default=0)
    if longest > MAX_SAVE_RUN:
        return (
            f"memory_save 'content' has a run of {longest:,} characters without whitespace; "
            f"the limit is {MAX_SAVE_RUN:,}, because popoto's privacy scan slows down sharply "
            "on long runs. Leave the blob out or break it up. Nothing was saved."
        )
    return None


def privacy_refusal(service: Any, content: Any) -> str | None:
    """popoto's never-record filter dropped the save on purpose: say so, with its reason code.

    popoto itself answers "Nothing was saved … the backend is unreachable" for it.
    """
    memory = getattr(service, "_memory", None)
    if not getattr(memory, "last_extraction_privacy_dropped", False):
        return None
    reason = "unknown"
    try:
        # (popoto: optional, 0.55 s; imported by then, see runtime.import_popoto)
        from popoto.privacy.never_record import scan_never_record
    except ImportError:  # a popoto without the module: the reason stays unknown
        pass
    else:  # pure and total (non-text gives a clean verdict); bounded by MAX_SAVE_*
        reason = scan_never_record(content).reason or reason
    return (
        f"memory_save refused: popoto's never-record filter took the content for a secret or "
        f"personal data (reason: {reason}), so nothing was saved. Leave that part out and save "
        "again. popoto checks for credentials, private keys, tokens, passwords in URLs, card "
        "numbers (long digit runs that pass the Luhn check), US SSNs, high-entropy strings and "
        "off-the-record markers."
    )
