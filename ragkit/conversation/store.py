"""Where conversations live: one SQLite file (``sessions.sqlite`` in the user's data folder, or a path
given) holding every named session's exchanges and its pending clarification.

One row per **exchange** — the question, how it was read (the follow-up rewrite), the reply and its
status — inserted when the question is asked and completed when the answer is: two processes on one
session each add their own rows, so neither loses a turn and an answer never pairs with the other
process's question. Each write is one transaction (SQLite's own locking, a busy timeout, WAL), so a
crash mid-write leaves the file as it was before that write.

A reply's ``status``: ``answering`` (under way, or the process died), ``complete``, ``incomplete`` (Ctrl-C
or a failure while it streamed: the partial text is kept, marked), ``clarification`` (asked back),
``invalid`` (the question was refused before any step ran), ``failed`` (no answer could be produced).

The pending clarification is kept with the session, outside the model: the next message is read
against its options (:func:`ragkit.conversation.clarification.resolve_reply`).

A file that is not a readable ragkit session file — corrupted, another program's, or another
version's — is moved aside (``sessions.sqlite.unreadable-<time>``, kept untouched) and a new one is
started; :attr:`SessionStore.notice` says what happened, for the caller to show.

Hand-written over ``sqlite3`` (standard library): Haystack's chat message stores keep messages in
memory, not exchanges with statuses on disk.

Usage::

    store = SessionStore()                    # ~/.local/share/ragkit/sessions.sqlite
    row = store.begin("default", "Where was Tesla born?")
    store.finish(row, reply="Smiljan [1]", status="complete", confidence=0.73)
    store.exchanges("default")[-1].reply
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

APPLICATION_ID = 0x52414B43  # "RAKC": a file that is ours
FORMAT_VERSION = 1
STATUSES = ("answering", "complete", "incomplete", "clarification", "invalid", "failed")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    name TEXT PRIMARY KEY,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    pending TEXT
);
CREATE TABLE IF NOT EXISTS exchanges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT NOT NULL REFERENCES sessions(name),
    question TEXT NOT NULL,
    asked_as TEXT,
    reply TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    confidence REAL,
    sources TEXT NOT NULL DEFAULT '[]',
    meta TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL,
    finished REAL
);
CREATE INDEX IF NOT EXISTS exchanges_by_session ON exchanges(session, id);
"""


class SessionFileError(RuntimeError):
    """The session file cannot be used and could not be moved aside."""


def data_dir() -> Path:
    """``$RAGKIT_DATA``, else ``$XDG_DATA_HOME/ragkit``, else ``~/.local/share/ragkit``."""
    if os.environ.get("RAGKIT_DATA"):
        return Path(os.environ["RAGKIT_DATA"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "ragkit"


def check_session_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > 80 or any(ord(c) < 32 for c in name):
        raise ValueError(f"a session name is 1-80 printable characters, not {name!r}")
    return name.strip()


@dataclass
class Exchange:
    id: int
    session: str
    question: str
    asked_as: str | None
    reply: str
    status: str
    confidence: float | None
    sources: list[dict] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0
    finished: float | None = None

    @property
    def complete(self) -> bool:
        return self.status == "complete"


@dataclass
class SessionInfo:
    name: str
    exchanges: int
    updated: float
    pending: bool


class SessionStore:
    def __init__(self, path: str | Path | None = None, busy_timeout_s: float = 30.0):
        self.path = Path(path).expanduser() if path else data_dir() / "sessions.sqlite"
        self.busy_timeout_s = busy_timeout_s
        self.notice: str | None = None  # what happened to an unreadable file, for the caller to show
        self._open()

    # -- opening, and a file we cannot read ------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
        db.row_factory = sqlite3.Row
        return db

    def _open(self) -> None:
        deadline = time.monotonic() + self.busy_timeout_s
        while True:
            db = None
            try:
                db = self._connect()
                if self._is_new(db):  # no file yet, or one another process is creating right now
                    self._create(db)
                else:
                    self._check(db)
                break
            except (sqlite3.DatabaseError, _NotOurs) as exc:
                if db is not None:
                    db.close()
                if _locked(exc):  # another process holds the file (creating it, say): wait; a locked file is not unreadable
                    if time.monotonic() >= deadline:
                        raise SessionFileError(f"the session file {self.path} stayed locked by another process for {self.busy_timeout_s:g} s") from exc
                    time.sleep(0.05)
                    continue
                self._move_aside(str(exc))
        self.db = db

    @staticmethod
    def _is_new(db: sqlite3.Connection) -> bool:
        """An empty database: no ragkit marks and no tables (a new file, created by us or by another process now)."""
        marks = db.execute("PRAGMA application_id").fetchone()[0], db.execute("PRAGMA user_version").fetchone()[0]
        return marks == (0, 0) and db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0

    def _check(self, db: sqlite3.Connection) -> None:
        app, version = db.execute("PRAGMA application_id").fetchone()[0], db.execute("PRAGMA user_version").fetchone()[0]
        if app != APPLICATION_ID:
            raise _NotOurs("it is not a ragkit session file")
        if version != FORMAT_VERSION:
            raise _NotOurs(f"it is a ragkit session file of format {version}; this ragkit reads format {FORMAT_VERSION}")
        problem = db.execute("PRAGMA quick_check").fetchone()[0]
        if problem != "ok":
            raise sqlite3.DatabaseError(f"it is damaged ({problem})")
        db.execute("PRAGMA journal_mode=WAL")

    def _create(self, db: sqlite3.Connection) -> None:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute(f"PRAGMA user_version = {FORMAT_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _move_aside(self, why: str) -> None:
        kept = self.path.with_name(f"{self.path.name}.unreadable-{time.strftime('%Y%m%dT%H%M%S')}")
        n = 1
        while kept.exists():  # a second unreadable file in the same second must not replace the first
            n += 1
            kept = kept.with_name(f"{self.path.name}.unreadable-{time.strftime('%Y%m%dT%H%M%S')}-{n}")
        try:
            os.replace(self.path, kept)
            for suffix in ("-wal", "-shm"):  # the damaged file's journal goes with it
                side = self.path.with_name(self.path.name + suffix)
                if side.exists():
                    os.replace(side, kept.with_name(kept.name + suffix))
        except OSError as exc:
            raise SessionFileError(f"the session file {self.path} cannot be read ({why}) and could not be moved aside: {exc}") from exc
        self.notice = f"the session file {self.path} could not be read ({why}); it was kept as {kept} and a new one was started"

    def close(self) -> None:
        self.db.close()

    # -- writing -----------------------------------------------------------------------------------------
    def _write(self, sql: str, args: tuple) -> sqlite3.Cursor:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            cursor = self.db.execute(sql, args)
            self.db.execute("COMMIT")
            return cursor
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def ensure(self, name: str) -> str:
        name = check_session_name(name)
        now = time.time()
        self._write("INSERT INTO sessions(name, created, updated) VALUES (?, ?, ?) ON CONFLICT(name) DO NOTHING", (name, now, now))
        return name

    def begin(self, session: str, question: str, asked_as: str | None = None) -> int:
        """A new exchange, ``answering``; returns its id."""
        session = self.ensure(session)
        now = time.time()
        self.db.execute("BEGIN IMMEDIATE")
        try:
            cursor = self.db.execute("INSERT INTO exchanges(session, question, asked_as, status, created) VALUES (?, ?, ?, 'answering', ?)",
                                     (session, question, asked_as, now))
            self.db.execute("UPDATE sessions SET updated = ? WHERE name = ?", (now, session))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return int(cursor.lastrowid)

    def finish(self, exchange_id: int, reply: str, status: str, confidence: float | None = None, asked_as: str | None = None,
               sources: list[dict] | None = None, meta: dict[str, Any] | None = None) -> None:
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {status!r}")
        self._write(
            "UPDATE exchanges SET reply = ?, status = ?, confidence = ?, asked_as = COALESCE(?, asked_as), sources = ?, meta = ?, finished = ? WHERE id = ?",
            (reply, status, confidence, asked_as, json.dumps(sources or []), json.dumps(meta or {}, default=str), time.time(), exchange_id),
        )

    def set_pending(self, session: str, pending: dict[str, Any] | None) -> None:
        session = self.ensure(session)
        self._write("UPDATE sessions SET pending = ?, updated = ? WHERE name = ?", (json.dumps(pending) if pending else None, time.time(), session))

    def take_pending(self, session: str) -> dict[str, Any] | None:
        """The pending clarification, removed in the same transaction (two processes cannot both take it)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            row = self.db.execute("SELECT pending FROM sessions WHERE name = ?", (session,)).fetchone()
            self.db.execute("UPDATE sessions SET pending = NULL WHERE name = ?", (session,))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return json.loads(row["pending"]) if row and row["pending"] else None

    # -- reading -----------------------------------------------------------------------------------------
    def pending(self, session: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT pending FROM sessions WHERE name = ?", (session,)).fetchone()
        return json.loads(row["pending"]) if row and row["pending"] else None

    def exchanges(self, session: str, last: int | None = None) -> list[Exchange]:
        sql = "SELECT * FROM exchanges WHERE session = ? ORDER BY id"
        rows = self.db.execute(sql, (session,)).fetchall()
        if last is not None:
            rows = rows[-last:] if last > 0 else []
        return [Exchange(id=r["id"], session=r["session"], question=r["question"], asked_as=r["asked_as"], reply=r["reply"], status=r["status"],
                         confidence=r["confidence"], sources=json.loads(r["sources"] or "[]"), meta=json.loads(r["meta"] or "{}"),
                         created=r["created"], finished=r["finished"]) for r in rows]

    def sessions(self) -> list[SessionInfo]:
        rows = self.db.execute(
            "SELECT s.name, s.updated, s.pending IS NOT NULL AS pending, COUNT(e.id) AS n FROM sessions s LEFT JOIN exchanges e ON e.session = s.name "
            "GROUP BY s.name ORDER BY s.updated DESC").fetchall()
        return [SessionInfo(name=r["name"], exchanges=r["n"], updated=r["updated"], pending=bool(r["pending"])) for r in rows]


class _NotOurs(Exception):
    pass


def _locked(exc: BaseException) -> bool:
    """SQLite's "database is locked" / busy: another connection holds the file, nothing is wrong with it."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.OperationalError) and (code in (5, 6) or "locked" in str(exc) or "busy" in str(exc))
