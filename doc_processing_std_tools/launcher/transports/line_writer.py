"""Lines out to a descriptor in order, without blocking the event loop: the stdio transport's
writer of replies."""

from __future__ import annotations

import errno
import logging
import os
import queue
import select
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("dpt-launch")


class LineWriter:
    """Writes whole lines to a descriptor in the order given, from the caller when that
    cannot block, else from one daemon thread.

    A short line (at most ``PIPE_BUF``) goes out at once when nothing is queued and the
    descriptor has room (a pipe with room takes it whole): no thread wake-up on the way
    out of a call. On Linux one ``pwritev2(RWF_NOWAIT)`` both asks for room and writes
    (``EAGAIN``, nothing written, when there is none); elsewhere, and for a descriptor
    that does not take the flag, ``poll`` asks first. Anything else is queued for the
    thread, so the event loop never blocks on a full pipe. It also counts the requests
    still unanswered, so that stdin's EOF can wait for their replies (a client may write
    its last request and close at once).
    """

    def __init__(self, fd: int, *, nowait: bool = True) -> None:
        self._fd = fd
        self._unanswered: set[int | str] = set()
        # A request to answer: set.add needs no lock (requests are added by the reader alone,
        # and never once wait_for_answers runs, at stdin's end). Not a method: once per call.
        self.expect: Callable[[int | str], None] = self._unanswered.add
        self._counting = threading.Lock()  # (taken directly per call: Condition's are Python)
        self._answered = threading.Condition(self._counting)
        self._waiting = False  # (wait_for_answers, at stdin's end)
        self._lines: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._order = threading.Lock()  # guards _queued, and a line written at once
        self._queued = 0  # lines given to the thread and not yet written
        self._poll = _room_poll(fd)
        # (one syscall less per reply than poll + write: 3-9 us of a relayed call's path here)
        self._nowait = nowait and hasattr(os, "RWF_NOWAIT") and hasattr(os, "pwritev")
        self._thread = threading.Thread(target=self._run, name="dpt-launch stdout", daemon=True)
        self._thread.start()
        self.broken = False

    def put(self, line: bytes) -> None:
        if self.broken:
            return
        with self._order:
            # (room and _write_all inline: this runs once per reply)
            if not self._queued and len(line) <= select.PIPE_BUF:
                written = -1  # (nothing written: the thread writes it)
                try:
                    if self._nowait:
                        written = os.pwritev(self._fd, (line,), -1, os.RWF_NOWAIT)
                    elif (
                        self._poll is not None
                        and (events := self._poll(0))
                        and events[0][1] == select.POLLOUT
                    ):
                        written = os.write(self._fd, line)
                except BlockingIOError:
                    pass  # no room now
                except OSError as exc:
                    if not (self._nowait and exc.errno in (errno.EOPNOTSUPP, errno.EINVAL)):
                        self._broke(exc)
                        return
                    self._nowait = False  # (a kernel or a file without it: poll from now on)
                if written >= 0:
                    if written < len(line):  # (never, for a pipe with room)
                        try:
                            _write_all(self._fd, line[written:])
                        except OSError as exc:
                            self._broke(exc)
                    return
            self._queued += 1
        self._lines.put(line)

    def answered(self, request_id: Any) -> None:
        with self._counting:
            self._unanswered.discard(request_id)
            if self._waiting and not self._unanswered:
                self._answered.notify_all()

    def wait_for_answers(self) -> None:
        """Block until every request seen so far has its reply queued (or was cancelled)."""
        with self._answered:
            self._waiting = True
            self._answered.wait_for(lambda: not self._unanswered or self.broken)

    def close(self, timeout: float) -> None:
        """Let what is queued reach the descriptor (at most *timeout* seconds), then stop."""
        self._lines.put(None)
        self._thread.join(timeout)

    def _broke(self, exc: OSError) -> None:
        log.debug("stdout closed: %s", exc)  # the client closed its end
        with self._answered:
            self.broken = True
            self._answered.notify_all()

    def _run(self) -> None:
        while (line := self._lines.get()) is not None:
            try:
                _write_all(self._fd, line)
            except OSError as exc:
                self._broke(exc)
                return
            finally:
                # (the loop's variable would hold a long reply until the next one queued: a 5 MB
                # read's reply kept 5 MB, as short replies are written without the thread)
                del line
                with self._order:
                    self._queued -= 1


def _write_all(fd: int, line: bytes) -> None:
    written = os.write(fd, line)  # all of it, nearly always
    if written < len(line):
        view = memoryview(line)[written:]
        while view:
            view = view[os.write(fd, view) :]


def _room_poll(fd: int) -> Callable[[int], list[tuple[int, int]]] | None:
    """``poll`` for *fd*'s room to write (``POLLOUT`` alone in its events: a short line goes in
    whole without blocking); None where it cannot be polled."""
    if not hasattr(select, "poll"):
        return None
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return poller.poll
