"""``LineBuffer`` with a limit: an overlong line is dropped, and said with its head and length."""

from __future__ import annotations

from doc_processing_std_tools.launcher.lines import HEAD, LineBuffer


def test_an_overlong_line_in_pieces_is_told_with_its_head_and_length() -> None:
    told: list[tuple[bytes, int]] = []
    buffer = LineBuffer(max_line=3000, on_overlong=lambda head, size: told.append((head, size)))
    pieces = [bytes([ord("a") + i]) * 700 for i in range(5)]  # 3500 bytes: over at the fifth
    lines = [line for piece in pieces for line in buffer.feed(piece)]
    lines += buffer.feed(b"\nnext\n")
    assert lines == [b"next"]
    assert told == [(b"".join(pieces)[:HEAD], 3500)]


def test_a_line_over_the_limit_in_one_chunk_keeps_its_head() -> None:
    told: list[tuple[bytes, int]] = []
    buffer = LineBuffer(max_line=100, on_overlong=lambda head, size: told.append((head, size)))
    assert buffer.feed(b"ok\n" + b"x" * 5000 + b"\n") == [b"ok"]
    assert told == [(b"x" * HEAD, 5000)]
