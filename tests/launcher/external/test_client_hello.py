"""The stdio client's first line read while the launcher starts (``external/client_hello.py``):
its ``initialize`` params for the sessions, and every byte read handed on to the transport."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from doc_processing_std_tools.launcher.external import client_hello

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {"roots": {}},
        "clientInfo": {"name": "probe-client", "version": "1.0"},
    },
}


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read, write = os.pipe()
    try:
        yield read, write
    finally:
        client_hello.forget()
        os.close(read)
        os.close(write)


async def test_the_first_line_says_who_the_client_is_and_every_byte_is_handed_on(
    pipe: tuple[int, int],
) -> None:
    read, write = pipe
    client_hello.listen(5.0, read)
    sent = json.dumps(INITIALIZE).encode() + b"\n" + b'{"jsonrpc": "2.0", "method": "x"'
    os.write(write, sent)
    assert await client_hello.client_params() == INITIALIZE["params"]
    assert client_hello.take() == sent  # (the transport serves these first)
    assert client_hello.take() == b""


async def test_another_first_line_or_none_in_time_leaves_the_launchers_params(
    pipe: tuple[int, int],
) -> None:
    read, write = pipe
    client_hello.listen(0.05, read)
    assert await client_hello.client_params() is None  # (nothing came within the grace)
    os.write(write, b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n')
    client_hello.forget()
    client_hello.listen(5.0, read)
    assert await client_hello.client_params() is None
    assert client_hello.take() == b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n'


async def test_nothing_listens_without_a_stdio_client() -> None:
    assert await client_hello.client_params() is None
    assert client_hello.take() == b""
