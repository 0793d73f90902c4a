"""Embedded store: one SQLite file in WAL mode, safe for several worker processes.

All SQLite calls run on one dedicated thread per process, so the event loop never blocks on
disk and the connection is never shared between threads.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from proxy.store.base import StoreUnavailable

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL, expires REAL NOT NULL);
CREATE TABLE IF NOT EXISTS members (key TEXT NOT NULL, member TEXT NOT NULL, expires REAL NOT NULL,
                                    PRIMARY KEY (key, member));
CREATE TABLE IF NOT EXISTS lists (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL,
                                  value BLOB NOT NULL, expires REAL NOT NULL);
CREATE INDEX IF NOT EXISTS lists_key ON lists (key, id);
CREATE INDEX IF NOT EXISTS kv_expires ON kv (expires);
CREATE TABLE IF NOT EXISTS hashes (key TEXT NOT NULL, field TEXT NOT NULL, value NUMERIC NOT NULL,
                                   expires REAL NOT NULL, PRIMARY KEY (key, field));
CREATE TABLE IF NOT EXISTS ranked (key TEXT NOT NULL, member TEXT NOT NULL, score REAL NOT NULL,
                                   expires REAL NOT NULL, PRIMARY KEY (key, member));
CREATE INDEX IF NOT EXISTS ranked_score ON ranked (key, score);
"""
TABLES = ("kv", "members", "lists", "hashes", "ranked")
PURGE_EVERY = 300.0  # seconds between sweeps of expired rows
BATCH = 500  # keys per IN (...) query, well under SQLite's bound-parameter limit


class SQLiteStore:
    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / "offload.sqlite3"
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="offload-sqlite")
        self._db: sqlite3.Connection | None = None
        self._last_purge = 0.0

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(SCHEMA)
            self._db = db
        return self._db

    async def _run(self, fn: Callable[[sqlite3.Connection, float], T]) -> T:
        def call() -> T:
            db = self._connect()
            now = time.time()
            if now - self._last_purge > PURGE_EVERY:
                self._last_purge = now
                with db:
                    for table in TABLES:
                        db.execute(f"DELETE FROM {table} WHERE expires < ?", (now,))
            return fn(db, now)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call)
        except sqlite3.Error as exc:
            raise StoreUnavailable(str(exc)) from exc

    async def put(self, key: str, value: bytes, ttl: int) -> None:
        def op(db: sqlite3.Connection, now: float) -> None:
            db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?, ?)", (key, value, now + ttl))

        await self._run(op)

    async def put_if_absent(self, key: str, value: bytes, ttl: int) -> bool:
        def op(db: sqlite3.Connection, now: float) -> bool:
            with db:
                db.execute("DELETE FROM kv WHERE key = ? AND expires < ?", (key, now))
                cur = db.execute("INSERT OR IGNORE INTO kv VALUES (?, ?, ?)", (key, value, now + ttl))
                return cur.rowcount == 1

        return await self._run(op)

    async def get(self, key: str, ttl: int | None = None) -> bytes | None:
        def op(db: sqlite3.Connection, now: float) -> bytes | None:
            row = db.execute("SELECT value FROM kv WHERE key = ? AND expires >= ?", (key, now)).fetchone()
            if row is not None and ttl is not None:
                db.execute("UPDATE kv SET expires = ? WHERE key = ?", (now + ttl, key))
            return None if row is None else bytes(row[0])

        return await self._run(op)

    async def touch(self, keys: Sequence[str], ttl: int, *, slack: int = 0) -> list[bool]:
        def op(db: sqlite3.Connection, now: float) -> list[bool]:
            live: dict[str, float] = {}
            for start in range(0, len(keys), BATCH):
                batch = keys[start : start + BATCH]
                marks = ",".join("?" * len(batch))
                live.update(
                    db.execute(f"SELECT key, expires FROM kv WHERE key IN ({marks}) AND expires >= ?", (*batch, now))
                )
            due = [(now + ttl, k, now) for k, expires in live.items() if expires <= now + ttl - slack]
            if due:  # a read costs nothing; a write only when the expiry is `slack` seconds old
                with db:
                    db.executemany("UPDATE kv SET expires = ? WHERE key = ? AND expires >= ?", due)
            return [k in live for k in keys]

        return await self._run(op) if keys else []

    async def delete(self, key: str) -> None:
        def op(db: sqlite3.Connection, now: float) -> None:
            with db:
                for table in TABLES:
                    db.execute(f"DELETE FROM {table} WHERE key = ?", (key,))

        await self._run(op)

    async def delete_if(self, key: str, value: bytes) -> bool:
        def op(db: sqlite3.Connection, now: float) -> bool:
            with db:
                cur = db.execute("DELETE FROM kv WHERE key = ? AND value = ? AND expires >= ?", (key, value, now))
                return cur.rowcount == 1

        return await self._run(op)

    async def extend_if(self, key: str, value: bytes, ttl: int) -> bool:
        def op(db: sqlite3.Connection, now: float) -> bool:
            with db:
                cur = db.execute(
                    "UPDATE kv SET expires = ? WHERE key = ? AND value = ? AND expires >= ?",
                    (now + ttl, key, value, now),
                )
                return cur.rowcount == 1

        return await self._run(op)

    async def replace_if(self, key: str, expected: bytes, value: bytes) -> bool:
        def op(db: sqlite3.Connection, now: float) -> bool:
            with db:
                cur = db.execute(
                    "UPDATE kv SET value = ? WHERE key = ? AND value = ? AND expires >= ?", (value, key, expected, now)
                )
                return cur.rowcount == 1

        return await self._run(op)

    async def add_members(self, key: str, members: Sequence[str], ttl: int, *, slack: int = 0) -> None:
        def op(db: sqlite3.Connection, now: float) -> None:
            if slack > 0:  # read first: write only what is missing, or an expiry that is due
                rows = db.execute("SELECT member, expires FROM members WHERE key = ? AND expires >= ?", (key, now))
                present = dict(rows.fetchall())
                if all(m in present for m in members) and min(present.values()) > now + ttl - slack:
                    return
            with db:
                db.executemany(
                    "INSERT OR REPLACE INTO members VALUES (?, ?, ?)", [(key, m, now + ttl) for m in members]
                )
                db.execute("UPDATE members SET expires = ? WHERE key = ?", (now + ttl, key))

        if members:
            await self._run(op)

    async def members(self, key: str) -> set[str]:
        def op(db: sqlite3.Connection, now: float) -> set[str]:
            rows = db.execute("SELECT member FROM members WHERE key = ? AND expires >= ?", (key, now))
            return {row[0] for row in rows}

        return await self._run(op)

    async def push(self, key: str, value: bytes, *, max_len: int, ttl: int) -> None:
        def op(db: sqlite3.Connection, now: float) -> None:
            with db:
                db.execute("INSERT INTO lists (key, value, expires) VALUES (?, ?, ?)", (key, value, now + ttl))
                db.execute("UPDATE lists SET expires = ? WHERE key = ?", (now + ttl, key))
                db.execute(
                    "DELETE FROM lists WHERE key = ? AND id NOT IN "
                    "(SELECT id FROM lists WHERE key = ? ORDER BY id DESC LIMIT ?)",
                    (key, key, max_len),
                )

        await self._run(op)

    async def items(self, key: str) -> list[bytes]:
        def op(db: sqlite3.Connection, now: float) -> list[bytes]:
            rows = db.execute("SELECT value FROM lists WHERE key = ? AND expires >= ? ORDER BY id", (key, now))
            return [bytes(row[0]) for row in rows]

        return await self._run(op)

    async def replace_items(self, key: str, replacements: Mapping[bytes, bytes]) -> int:
        def op(db: sqlite3.Connection, now: float) -> int:
            with db:
                return sum(
                    db.execute(
                        "UPDATE lists SET value = ? WHERE key = ? AND value = ? AND expires >= ?", (new, key, old, now)
                    ).rowcount
                    for old, new in replacements.items()
                )

        return await self._run(op) if replacements else 0

    async def incr(self, key: str, amount: int, ttl: int) -> int:
        def op(db: sqlite3.Connection, now: float) -> int:
            with db:
                db.execute("DELETE FROM kv WHERE key = ? AND expires < ?", (key, now))
                # one atomic statement; the value stays bytes (its decimal digits), as in Redis
                row = db.execute(
                    "INSERT INTO kv VALUES (?, CAST(? AS BLOB), ?) ON CONFLICT(key) DO UPDATE SET "
                    "value = CAST(CAST(CAST(kv.value AS TEXT) AS INTEGER) + ? AS BLOB), expires = excluded.expires "
                    "RETURNING value",
                    (key, amount, now + ttl, amount),
                ).fetchone()
                return int(bytes(row[0]))

        return await self._run(op)

    async def incr_fields(self, key: str, amounts: Mapping[str, int | float], ttl: int) -> None:
        def op(db: sqlite3.Connection, now: float) -> None:
            with db:
                db.execute("DELETE FROM hashes WHERE key = ? AND expires < ?", (key, now))  # expired: from 0
                db.executemany(
                    "INSERT INTO hashes VALUES (?, ?, ?, ?) ON CONFLICT(key, field) DO UPDATE SET "
                    "value = hashes.value + excluded.value",
                    [(key, field, amount, now + ttl) for field, amount in amounts.items()],
                )
                db.execute("UPDATE hashes SET expires = ? WHERE key = ?", (now + ttl, key))

        if amounts:
            await self._run(op)

    async def set_fields(
        self, key: str, values: Mapping[str, int | float], ttl: int, *, only_new: bool = False
    ) -> None:
        conflict = "DO NOTHING" if only_new else "DO UPDATE SET value = excluded.value"

        def op(db: sqlite3.Connection, now: float) -> None:
            with db:
                db.execute("DELETE FROM hashes WHERE key = ? AND expires < ?", (key, now))  # expired: afresh
                db.executemany(
                    f"INSERT INTO hashes VALUES (?, ?, ?, ?) ON CONFLICT(key, field) {conflict}",
                    [(key, field, value, now + ttl) for field, value in values.items()],
                )
                db.execute("UPDATE hashes SET expires = ? WHERE key = ?", (now + ttl, key))

        if values:
            await self._run(op)

    async def hashes(self, keys: Sequence[str]) -> list[dict[str, int | float]]:
        def op(db: sqlite3.Connection, now: float) -> list[dict[str, int | float]]:
            found: dict[str, dict[str, int | float]] = {}
            for start in range(0, len(keys), BATCH):
                batch = keys[start : start + BATCH]
                marks = ",".join("?" * len(batch))
                rows = db.execute(
                    f"SELECT key, field, value FROM hashes WHERE key IN ({marks}) AND expires >= ?", (*batch, now)
                )
                for k, field, value in rows:
                    found.setdefault(k, {})[field] = value
            return [found.get(k, {}) for k in keys]

        return await self._run(op) if keys else []

    async def rank(self, key: str, member: str, score: float, *, ttl: int, drop_below: float | None = None) -> None:
        # each member carries its own expiry (rewriting a whole large set's would cost a write
        # per member); as in Redis, a set nobody writes to for `ttl` seconds is gone
        def op(db: sqlite3.Connection, now: float) -> None:
            with db:
                db.execute("INSERT OR REPLACE INTO ranked VALUES (?, ?, ?, ?)", (key, member, score, now + ttl))
                if drop_below is not None:
                    db.execute("DELETE FROM ranked WHERE key = ? AND score < ?", (key, drop_below))

        await self._run(op)

    async def rank_add(self, key: str, amounts: Mapping[str, float], ttl: int) -> None:
        def op(db: sqlite3.Connection, now: float) -> None:
            with db:  # an expired member starts again from 0
                db.executemany(
                    "INSERT INTO ranked VALUES (?, ?, ?, ?) ON CONFLICT(key, member) DO UPDATE SET "
                    "score = CASE WHEN ranked.expires >= ? THEN ranked.score + excluded.score "
                    "ELSE excluded.score END, expires = excluded.expires",
                    [(key, member, amount, now + ttl, now) for member, amount in amounts.items()],
                )

        if amounts:
            await self._run(op)

    async def ranked(self, key: str, offset: int, limit: int) -> tuple[int, list[tuple[str, float]]]:
        def op(db: sqlite3.Connection, now: float) -> tuple[int, list[tuple[str, float]]]:
            (total,) = db.execute("SELECT count(*) FROM ranked WHERE key = ? AND expires >= ?", (key, now)).fetchone()
            rows = db.execute(
                "SELECT member, score FROM ranked WHERE key = ? AND expires >= ? "
                "ORDER BY score DESC, member DESC LIMIT ? OFFSET ?",
                (key, now, max(limit, 0), offset),
            )
            return total, [(m, float(sc)) for m, sc in rows]

        return await self._run(op)

    async def ping(self) -> bool:
        try:
            return await self._run(lambda db, now: db.execute("SELECT 1").fetchone() == (1,))
        except StoreUnavailable:
            return False

    async def close(self) -> None:
        def op(db: sqlite3.Connection, now: float) -> None:
            db.close()
            self._db = None

        if self._db is not None:
            await self._run(op)
        self._executor.shutdown(wait=True)
