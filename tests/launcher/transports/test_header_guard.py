"""Which requests end a connection's pending state (a shorter header deadline, evicted first):
a valid bearer token, or the console's sign-in cookie holding one."""

from __future__ import annotations

import subprocess
import sys

from doc_processing_std_tools.launcher.transports.header_guard import slow_header_guard

TOKEN = "guard-token-91ab"


def test_a_valid_token_in_the_header_or_the_console_cookie_shows_a_token() -> None:
    limits = slow_header_guard(10.0, tokens=[TOKEN]).limits
    shows = limits.shows_token
    assert shows([(b"authorization", f"Bearer {TOKEN}".encode())])
    assert shows([(b"cookie", f"theme=dark; dpt_console={TOKEN}".encode())])
    assert not shows([(b"cookie", b"dpt_console=guess")])
    assert not shows([(b"cookie", f"other={TOKEN}".encode())])
    assert not shows([(b"authorization", b"Bearer guess")])
    assert not shows([])


def test_without_tokens_every_request_shows_one() -> None:
    assert slow_header_guard(10.0).limits.shows_token([])


def _h11_loaded(code: str, before: str = "") -> bool:
    """Whether a fresh interpreter running *code* (which builds the guard; *before* runs ahead
    of importing it) imported h11."""
    script = (
        f"import sys\n{before}\n"
        "from doc_processing_std_tools.launcher.transports.header_guard import slow_header_guard\n"
        f"{code}\nprint('h11' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip() == "True"


def test_without_httptools_the_guard_is_on_the_h11_protocol() -> None:
    """h11 is imported only where httptools is missing: that path still builds its guard."""
    assert _h11_loaded(
        "from uvicorn.protocols.http.h11_impl import H11Protocol\n"
        "assert issubclass(slow_header_guard(1.0), H11Protocol)",
        before="sys.modules['httptools'] = None",
    )


def test_with_httptools_h11_is_not_imported() -> None:
    assert not _h11_loaded("slow_header_guard(1.0)")
