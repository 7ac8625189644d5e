"""SessionStore: exchanges on disk across restarts and processes, unreadable files moved aside (never
overwritten), the pending clarification taken once, huge and interrupted exchanges kept as they were."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ragkit.conversation.store import APPLICATION_ID, FORMAT_VERSION, SessionFileError, SessionStore

REPO = Path(__file__).resolve().parent.parent

# A child process: waits for the "go" file so that every child starts writing at once, opens the store
# (the first open of a new file included) and writes its turns, each answer naming its own question.
WRITER = """
import pathlib, sys, time
from ragkit.conversation.store import SessionStore
path, who, turns, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), pathlib.Path(sys.argv[4])
while not go.exists():
    time.sleep(0.002)
store = SessionStore(path)
for i in range(turns):
    row = store.begin("shared", f"{who} question {i}")
    store.finish(row, reply=f"answer to {who} question {i}", status="complete", confidence=0.5)
print(store.notice or "ok")
store.close()
"""

TAKER = """
import json, pathlib, sys, time
from ragkit.conversation.store import SessionStore
path, go = sys.argv[1], pathlib.Path(sys.argv[2])
store = SessionStore(path)
while not go.exists():
    time.sleep(0.001)
print(json.dumps(store.take_pending("s")))
"""


def _children(script: str, args: list[list[str]], go: Path) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", script, *a], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for a in args]
    time.sleep(0.3)  # every child has started (and imported) before any is let go
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    return [out.strip() for out, _ in outs]


def _aside(path: Path) -> list[Path]:
    return sorted(p for p in path.parent.glob(path.name + ".unreadable-*") if not p.name.endswith(("-wal", "-shm")))


# -- a kernel restart ---------------------------------------------------------------------------------
def test_exchanges_survive_a_new_store_on_the_same_file(tmp_path):
    path = tmp_path / "sessions.sqlite"
    first = SessionStore(path)
    row = first.begin("tesla", "Where was Nikola Tesla born?")
    first.finish(row, reply="Smiljan [1]", status="complete", confidence=0.73, sources=[{"source": "tesla.md", "title": "Nikola Tesla"}],
                 meta={"llm_calls": 1})
    first.begin("tesla", "and what did he study?")  # begun, never finished: the process died
    first.set_pending("other", {"question": "Where is Washington?", "options": [{"label": "A", "scope": {"source": ["a.md"]}}]})
    first.close()

    again = SessionStore(path)  # the restarted kernel
    assert again.notice is None and not _aside(path)
    done, open_ = again.exchanges("tesla")
    assert (done.question, done.reply, done.status, done.confidence) == ("Where was Nikola Tesla born?", "Smiljan [1]", "complete", 0.73)
    assert done.complete and done.sources == [{"source": "tesla.md", "title": "Nikola Tesla"}] and done.meta == {"llm_calls": 1}
    assert open_.status == "answering" and not open_.complete and open_.reply == ""
    assert again.pending("other")["question"] == "Where is Washington?"
    assert {s.name: (s.exchanges, s.pending) for s in again.sessions()} == {"tesla": (2, False), "other": (0, True)}
    assert [e.question for e in again.exchanges("tesla", last=1)] == ["and what did he study?"]


def test_bad_session_names_and_statuses_are_refused(tmp_path):
    store = SessionStore(tmp_path / "s.sqlite")
    for name in ("", "   ", "x" * 81, "tab\there", None):
        with pytest.raises(ValueError, match="session name"):
            store.begin(name, "q")
    row = store.begin("ok", "q")
    with pytest.raises(ValueError, match="status"):
        store.finish(row, reply="a", status="done")
    assert store.exchanges("ok")[0].status == "answering"


# -- a file we cannot read: moved aside, kept byte for byte, a new store started ------------------------
def _foreign_sqlite(path: Path, application_id: int, user_version: int) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (body TEXT)")
    db.execute("INSERT INTO notes VALUES ('someone else''s data')")
    db.execute(f"PRAGMA application_id = {application_id}")
    db.execute(f"PRAGMA user_version = {user_version}")
    db.commit()
    db.close()


@pytest.mark.parametrize("kind", ["random bytes", "another program's database", "another ragkit format"])
def test_an_unreadable_file_is_moved_aside_untouched_and_a_new_store_starts(tmp_path, kind):
    path = tmp_path / "sessions.sqlite"
    if kind == "random bytes":
        path.write_bytes(b"\x00garbage" + os.urandom(8192))
    elif kind == "another program's database":
        _foreign_sqlite(path, application_id=0, user_version=0)
    else:
        _foreign_sqlite(path, application_id=APPLICATION_ID, user_version=FORMAT_VERSION + 1)
    before = path.read_bytes()

    store = SessionStore(path)
    kept = _aside(path)
    assert len(kept) == 1 and kept[0].read_bytes() == before
    assert store.notice and "could not be read" in store.notice and str(kept[0]) in store.notice
    if kind == "another ragkit format":
        assert f"format {FORMAT_VERSION + 1}" in store.notice
    row = store.begin("s", "Where was Tesla born?")  # the new store works
    store.finish(row, reply="Smiljan", status="complete")
    store.close()
    reopened = SessionStore(path)
    assert reopened.notice is None and [e.reply for e in reopened.exchanges("s")] == ["Smiljan"]
    assert kept[0].read_bytes() == before


def test_two_unreadable_files_in_a_row_are_both_kept(tmp_path):
    """The aside name has a one-second clock: a second bad file in the same second must not replace the first."""
    path = tmp_path / "sessions.sqlite"
    contents = [b"first garbage " + os.urandom(2048), b"second garbage " + os.urandom(2048)]
    for content in contents:
        path.write_bytes(content)
        SessionStore(path).close()
    assert sorted(p.read_bytes() for p in _aside(path)) == sorted(contents)


# -- two processes, one session -------------------------------------------------------------------------
@pytest.mark.parametrize("fresh", [False, True], ids=["existing file", "both create the file"])
def test_two_processes_writing_one_session_lose_no_turn(tmp_path, fresh):
    path = tmp_path / "sessions.sqlite"
    if not fresh:
        SessionStore(path).close()
    notices = _children(WRITER, [[str(path), who, "20", str(tmp_path / "go")] for who in ("A", "B")], tmp_path / "go")
    assert notices == ["ok", "ok"] and not _aside(path)  # a file another process is creating is not "unreadable"
    exchanges = SessionStore(path).exchanges("shared")
    assert len(exchanges) == 40
    assert all(e.complete and e.reply == f"answer to {e.question}" for e in exchanges)  # no answer paired with another's question
    for who in ("A", "B"):  # each process's turns, all there and in its order
        assert [e.question for e in exchanges if e.question.startswith(who)] == [f"{who} question {i}" for i in range(20)]


def test_processes_opening_a_new_file_at_once_move_nothing_aside(tmp_path):
    """The first open of a new file races with the others: the file one process is creating is not "unreadable"."""
    for round_ in range(5):
        path, go = tmp_path / f"round{round_}.sqlite", tmp_path / f"go{round_}"
        notices = _children(WRITER, [[str(path), f"P{i}", "3", str(go)] for i in range(4)], go)
        assert notices == ["ok"] * 4 and not _aside(path), notices
        assert len(SessionStore(path).exchanges("shared")) == 12


def test_the_pending_clarification_is_taken_once(tmp_path):
    path = tmp_path / "sessions.sqlite"
    one, two = SessionStore(path), SessionStore(path)
    pending = {"question": "Where is Washington?", "options": [{"label": "Washington (state)", "scope": {"source": ["wa.md"]}}], "asked": 1}
    one.set_pending("s", pending)
    assert two.pending("s") == pending  # another process sees it
    assert two.take_pending("s") == pending and one.take_pending("s") is None and one.pending("s") is None
    assert one.take_pending("never-created") is None

    for _ in range(25):  # two takers at once, each on its own connection: exactly one gets it
        one.set_pending("s", pending)
        got, start = [], threading.Barrier(2)

        def take():
            store = SessionStore(path)  # a connection belongs to the thread that opened it
            start.wait()
            got.append(store.take_pending("s"))
            store.close()

        threads = [threading.Thread(target=take) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(map(bool, got)) == [False, True], got


def test_two_processes_take_the_pending_clarification_once(tmp_path):
    path = tmp_path / "sessions.sqlite"
    SessionStore(path).set_pending("s", {"question": "q", "options": []})
    outs = _children(TAKER, [[str(path), str(tmp_path / "go")] for _ in range(3)], tmp_path / "go")
    assert sorted(outs).count("null") == 2 and sum(o != "null" for o in outs) == 1, outs


# -- what an exchange holds -----------------------------------------------------------------------------
def test_a_100_kb_message_and_reply_round_trip(tmp_path):
    path = tmp_path / "sessions.sqlite"
    question = ("Wie heißt die Hauptstadt? 東京 — " * 4000)[:100_000]
    reply = "x\x00y " + "é" * 100_000  # a NUL and non-ASCII text too
    store = SessionStore(path)
    row = store.begin("big", question)
    store.finish(row, reply=reply, status="complete")
    store.close()
    got = SessionStore(path).exchanges("big")[0]
    assert got.question == question and got.reply == reply


def test_an_interrupted_exchange_is_stored_incomplete_with_its_partial_reply(tmp_path):
    path = tmp_path / "sessions.sqlite"
    store = SessionStore(path)
    row = store.begin("s", "Where was Tesla born?")
    store.finish(row, reply="Tesla was born in Smil", status="incomplete", meta={"interrupted": True})  # Ctrl-C mid-stream
    store.close()
    got = SessionStore(path).exchanges("s")[0]
    assert got.status == "incomplete" and not got.complete
    assert got.reply == "Tesla was born in Smil" and got.meta == {"interrupted": True} and got.finished is not None


def test_a_locked_file_is_waited_for_and_never_moved_aside(tmp_path):
    path = tmp_path / "sessions.sqlite"
    SessionStore(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")  # another process holds the file for longer than we wait
    try:
        with pytest.raises(SessionFileError, match="locked"):
            SessionStore(path, busy_timeout_s=0.3)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert not _aside(path) and SessionStore(path).notice is None
