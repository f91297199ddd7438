"""The embedded store's SQLite connections: threads that open theirs at the same moment on a new file."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from ragbot.stores.embedded.schema import Database

THREADS = 6
TRIALS = 60  # before the fix about one trial in six failed: 60 trials miss it with odds under 1 in 10^4


def _create(conn: sqlite3.Connection) -> None:
    conn.executescript("CREATE TABLE IF NOT EXISTS generation(id INTEGER PRIMARY KEY, value INTEGER);")


def test_threads_opening_their_connections_at_once_on_a_new_file_all_get_one(tmp_path: Path) -> None:
    errors: list[str] = []
    for trial in range(TRIALS):
        db = Database(
            path=tmp_path / f"{trial}.sqlite3", synchronous="NORMAL", busy_timeout_s=10.0, create=_create
        )
        start = threading.Barrier(THREADS)

        def first_read(db: Database = db, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                db.conn().execute("SELECT count(*) FROM generation").fetchall()
            except sqlite3.Error as exc:  # "database is locked": two threads set WAL mode at once
                errors.append(repr(exc))

        threads = [threading.Thread(target=first_read) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        db.close()
    assert errors == []
