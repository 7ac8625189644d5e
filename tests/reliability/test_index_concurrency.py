"""Two `ragkit index` runs on one index, in separate processes, both keep their files: writers
queue on the index's inter-process lock, and one that waits too long gets a clear error."""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ragkit.index.store import IndexLockedError, RagIndex, index_write_lock
from ragkit.ui.cli import main

pytestmark = pytest.mark.fault("data_loss")
REPO = Path(__file__).resolve().parents[2]

# load-or-create, pause (so the writers overlap), add this writer's source, save: the read-modify-write
# that lost a side's files when two ran at once
WRITER = """
import hashlib, random, sys, time
from haystack import Document
from ragkit.index.store import RagIndex, index_write_lock
idx, source, go = sys.argv[1], sys.argv[2], sys.argv[3]
while not __import__("os").path.exists(go):
    time.sleep(0.01)
with index_write_lock(idx, timeout=120):
    index = RagIndex.load(idx) if RagIndex.exists(idx) else RagIndex(embedder="fake", dim=8)
    time.sleep(0.5)
    texts = [f"{source} says something about rivers, part {i}" for i in range(3)]
    vectors = [[random.Random(hashlib.sha256(t.encode()).hexdigest()).uniform(-1, 1) for _ in range(8)] for t in texts]
    index.add([Document(content=t, meta={"source": source}, embedding=v) for t, v in zip(texts, vectors)])
    index.save(idx)
"""

HOLDER = """
import sys, time
from pathlib import Path
from ragkit.index.store import index_write_lock
with index_write_lock(sys.argv[1]):
    Path(sys.argv[2]).write_text("held")
    time.sleep(120)
"""


def test_concurrent_writers_under_the_lock_keep_every_writers_files(tmp_path):
    idx, go = tmp_path / "idx", tmp_path / "go"
    sources = [f"writer-{i}.md" for i in range(3)]
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(idx), s, str(go)], stderr=subprocess.PIPE, text=True) for s in sources]
    time.sleep(0.5)
    go.write_text("go")
    for proc in procs:
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-3000:]
    index = RagIndex.load(idx)
    assert set(index.sources) == set(sources) and len(index) == 9


def test_a_writer_that_waits_too_long_gets_a_clear_error_and_the_lock_frees_on_exit(tmp_path, capsys):
    idx, held = tmp_path / "idx", tmp_path / "held"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(idx), str(held)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not held.exists():
            assert holder.poll() is None and time.monotonic() < deadline, holder.stderr.read() if holder.poll() is not None else "timeout"
            time.sleep(0.05)
        started = time.monotonic()
        with pytest.raises(IndexLockedError, match="Another ragkit index run holds the write lock"):
            with index_write_lock(idx, timeout=0.5):
                pass
        assert 0.4 < time.monotonic() - started < 10
        docs = tmp_path / "docs"
        docs.mkdir()
        (docs / "a.md").write_text("# A\n\nSome text.\n")
        assert main(["index", str(docs), "--index-dir", str(idx), "--quiet", "--lock-timeout", "0.3"]) == 2
        err = capsys.readouterr().err
        assert "Another ragkit index run holds the write lock" in err and "Traceback" not in err
    finally:
        holder.kill()
        holder.wait(timeout=30)
    with index_write_lock(idx, timeout=5):  # a killed holder's lock is released by the kernel
        pass


def test_the_lock_is_reentrant_in_a_thread_and_exclusive_between_threads(tmp_path):
    idx = tmp_path / "idx"
    index = RagIndex(embedder="fake", dim=8)
    order = []
    with index_write_lock(idx, timeout=5):
        index.save(idx)  # save takes the lock too: no deadlock against our own hold

        def other():
            with index_write_lock(idx, timeout=30):
                order.append("other")

        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.3)
        order.append("first")
    thread.join(timeout=30)
    assert order == ["first", "other"]


@pytest.mark.integration
def test_two_build_index_runs_at_once_keep_both_folders(tmp_path):
    """The issue's reproduction with the real embedder: `ragkit index A & ragkit index B & wait`."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        for i in range(2):
            (tmp_path / name / f"{name}{i}.md").write_text(f"# {name}{i}\n\nFile {i} of folder {name} talks about rivers.\n")
    idx = tmp_path / "idx"
    runs = [
        subprocess.Popen([sys.executable, "-m", "ragkit.ui.cli", "index", str(tmp_path / n), "--index-dir", str(idx), "--quiet"],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for n in ("a", "b")
    ]
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-3000:]
    names = sorted(Path(s).name for s in RagIndex.load(idx).sources)
    assert names == ["a0.md", "a1.md", "b0.md", "b1.md"], json.dumps(names)
