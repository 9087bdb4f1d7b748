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


def test_without_httptools_the_guard_is_on_the_h11_protocol() -> None:
    """h11 is imported only where httptools is missing: that path still builds its guard."""
    code = (
        "import sys; sys.modules['httptools'] = None\n"
        "from doc_processing_std_tools.launcher.transports.header_guard import slow_header_guard\n"
        "from uvicorn.protocols.http.h11_impl import H11Protocol\n"
        "assert issubclass(slow_header_guard(1.0), H11Protocol)\n"
        "print('h11' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


def test_with_httptools_h11_is_not_imported() -> None:
    code = (
        "import sys\n"
        "from doc_processing_std_tools.launcher.transports.header_guard import slow_header_guard\n"
        "slow_header_guard(1.0)\n"
        "print('h11' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
