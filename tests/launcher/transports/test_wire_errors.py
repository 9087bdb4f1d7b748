"""``wire_errors``: what the stdio transport answers for itself."""

from __future__ import annotations

from typing import Any

import pytest

from doc_processing_std_tools.launcher.transports.wire_errors import boolean_progress_token


@pytest.mark.parametrize(
    ("params", "refused"),
    [
        ({"_meta": {"progressToken": True}}, True),
        ({"_meta": {"progressToken": False}}, True),
        ({"_meta": {"progressToken": 1}}, False),
        ({"_meta": {"progressToken": "t"}}, False),
        ({"_meta": None}, False),
        ({}, False),
        (None, False),
    ],
)
def test_only_a_boolean_progress_token_is_refused(params: Any, refused: bool) -> None:
    assert boolean_progress_token(params) is refused
