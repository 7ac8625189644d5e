"""Readers in other processes, loading while a writer saves over and over, only ever see complete
indexes; and a save leaves the index folder's mode and the caches kept beside it alone."""

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ragkit.index.store import RagIndex

pytestmark = pytest.mark.fault("data_loss")
HERE = Path(__file__).resolve().parent
SIZES = (40, 80, 120)  # chunk counts the writer cycles through; a reader must see one of them

COMMON = """
import hashlib, json, random, sys, time
from pathlib import Path
from haystack import Document
from ragkit.index.store import RagIndex

def build(n):
    index = RagIndex(embedder="fake", dim=8)
    docs = []
    for i in range(n):
        text = f"chunk {i} of {n} about rivers"
        rng = random.Random(hashlib.sha256(text.encode()).hexdigest())
        docs.append(Document(content=text, meta={"source": f"s{i % 4}.md"}, embedding=[rng.uniform(-1, 1) for _ in range(8)]))
    index.add(docs)
    return index
"""

WRITER = COMMON + """
idx, ready, done, seconds = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4])
indexes = [build(n) for n in json.loads(sys.argv[5])]
while not ready.exists():
    time.sleep(0.01)
saves, start = 0, time.monotonic()
while time.monotonic() - start < seconds:
    indexes[saves % len(indexes)].save(idx)
    saves += 1
done.write_text(str(saves))
"""

READER = COMMON + """
idx, ready, done, sizes = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), set(json.loads(sys.argv[4]))
seen, errors, loads = {}, [], 0
ready.write_text("go")
while not done.exists() or loads == 0:
    try:
        index = RagIndex.load(idx)
        n = len(index)
        complete = n in sizes and sum(i.chunks for i in index.sources.values()) == n == len(index.sparse_search("rivers", 1000))
        seen[str(n)] = seen.get(str(n), 0) + 1
        if not complete:
            errors.append(f"incomplete index: {n} chunks")
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}"[:300])
    loads += 1
print(json.dumps({"loads": loads, "seen": seen, "errors": errors[:20], "n_errors": len(errors)}))
"""


def test_readers_see_only_complete_indexes_while_a_writer_saves_repeatedly(tmp_path):
    idx, ready, done = tmp_path / "idx", tmp_path / "ready", tmp_path / "done"
    subprocess.run([sys.executable, "-c", COMMON + f"build({SIZES[0]}).save({str(idx)!r})"], check=True, timeout=120)
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(idx), str(ready), str(done), json.dumps(SIZES)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(idx), str(ready), str(done), "4", json.dumps(SIZES)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _, writer_err = writer.communicate(timeout=180)
        reader_out, reader_err = reader.communicate(timeout=60)
    finally:
        for proc in (reader, writer):
            if proc.poll() is None:
                proc.kill()
    assert writer.returncode == 0, writer_err[-3000:]
    assert reader.returncode == 0, reader_err[-3000:]
    result = json.loads(reader_out.strip().splitlines()[-1])
    saves = int(done.read_text())
    assert saves >= 20 and result["loads"] >= 20, (saves, result)
    assert result["n_errors"] == 0, result["errors"]
    assert len(result["seen"]) >= 2  # the reader did overlap the writer's saves


def test_a_save_keeps_the_index_folders_mode(tmp_path):
    idx = tmp_path / "idx"
    idx.mkdir()
    idx.chmod(0o751)
    index = RagIndex(embedder="fake", dim=8)
    index.save(idx)
    index.save(idx)
    assert stat.S_IMODE(idx.stat().st_mode) == 0o751  # was reset to 0700 by tempfile.mkdtemp
    umask = os.umask(0)
    os.umask(umask)
    for folder in [p for p in idx.rglob("*") if p.is_dir()]:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~umask, folder


def test_the_sentence_vector_cache_beside_an_index_survives_its_saves(tmp_path):
    from ragkit.index.sentence_vectors import SentenceVectorCache, sentence_key

    idx = tmp_path / "idx"
    index = RagIndex(embedder="fake", dim=8)
    index.save(idx)
    cache = SentenceVectorCache("fake-model")
    cache._add([sentence_key("The Rhine flows north.")], np.ones((1, 4), dtype=np.float32))
    path = SentenceVectorCache.file_for(index.path, "fake-model")
    cache.save(path)
    time.sleep(0.01)
    RagIndex.load(idx).save(idx)  # e.g. the next `ragkit index` run
    assert path.is_file() and SentenceVectorCache("fake-model").load(path) == 1
