"""SQLite for a server with many threads: writers queue in the process, not in SQLite.

SQLite lets one transaction write at a time. A writer that finds the database locked waits in
SQLite's busy handler, which sleeps between retries (up to 100 ms at a time) rather than being
woken when the lock is free: with tens of threads writing at once (a burst of execs), most of
the time goes to sleeping. Here every write transaction (they all begin IMMEDIATE) first takes
a lock of the process, which hands over the moment it is released; SQLite's own locking still
guards against other processes.
"""

import threading
from typing import TYPE_CHECKING, Any

from django.db.backends.sqlite3 import base

_writer = threading.Lock()

if TYPE_CHECKING:

    class _Base(base.DatabaseWrapper):
        # Django's own hooks for a transaction's start and end, which django-stubs leaves out.
        def _start_transaction_under_autocommit(self) -> None: ...
        def _commit(self) -> Any: ...
        def _rollback(self) -> Any: ...
        def _close(self) -> Any: ...

else:
    _Base = base.DatabaseWrapper


class DatabaseWrapper(_Base):
    _holds_writer = False

    def _start_transaction_under_autocommit(self) -> None:
        timeout = float(self.settings_dict.get("OPTIONS", {}).get("timeout", 5))
        # On timeout go on without it: SQLite's busy handler then decides, as it would anyway.
        self._holds_writer = _writer.acquire(timeout=timeout)
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._release_writer()
            raise

    def _commit(self) -> Any:
        try:
            return super()._commit()
        finally:
            self._release_writer()

    def _rollback(self) -> Any:
        try:
            return super()._rollback()
        finally:
            self._release_writer()

    def _close(self) -> Any:
        try:
            return super()._close()
        finally:
            self._release_writer()

    def _release_writer(self) -> None:
        if self._holds_writer:
            self._holds_writer = False
            _writer.release()
