"""When an index's saved copy is written: a few seconds after a change, or at exit, one pending
save at a time. Shared by the folder's index (:mod:`.index`) and the Redis one
(:mod:`.redis_index`), which say what they save and where."""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path
from typing import Any

INDEX_SAVE_DELAY = 2.0  # seconds from a change seen by a scan to the index's save


class SavedLater:
    """An index whose saved copy is written :data:`INDEX_SAVE_DELAY` seconds after a change.

    A subclass holds ``_lock`` (guarding its fields) and says what is saved:
    :meth:`_snapshot`, taken under the lock, and :meth:`_saved`, the file and its bytes.
    """

    _lock: threading.Lock
    _save_pending: bool = False

    def _schedule_save(self) -> None:
        """Save a few seconds from now, or at exit (one pending save at a time). Caller
        holds _lock."""
        if self._save_pending:
            return
        self._save_pending = True
        _UNSAVED.add(self)
        timer = threading.Timer(INDEX_SAVE_DELAY, self.save)
        timer.daemon = True
        timer.start()

    def save(self) -> None:
        """Write the saved copy now (atomically; a failure only costs the next process time)."""
        with self._lock:
            self._save_pending = False
            _UNSAVED.discard(self)
            snapshot = self._snapshot()
        if snapshot is None:
            return
        try:
            path, data = self._saved(snapshot)
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            temp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            temp.write_bytes(data)
            os.replace(temp, path)  # no fsync: a cache, checked entry by entry when loaded
        except OSError:
            pass

    def _snapshot(self) -> Any:
        """What to save, read under _lock; None: nothing to save."""
        raise NotImplementedError

    def _saved(self, snapshot: Any) -> tuple[Path, bytes]:
        """The saved copy's file and bytes (outside the lock; an OSError skips the save)."""
        raise NotImplementedError


_UNSAVED: set[SavedLater] = set()  # indexes with a save pending


@atexit.register
def _save_at_exit() -> None:
    for index in list(_UNSAVED):
        index.save()
