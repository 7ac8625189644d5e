"""A save killed (SIGKILL) at every write, fsync, rename and delete point leaves an index that loads
as the complete old one or the complete new one, and the next save works and tidies up.

The crashes are real: a helper process imports ragkit once, then forks one child per crash point;
the child sets ``versions._FAULT_HOOK`` to SIGKILL itself at that point and saves."""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ragkit.index import versions
from ragkit.index.store import IndexNotFoundError, RagIndex

pytestmark = pytest.mark.fault("data_loss")
HERE = Path(__file__).resolve().parent
OLD_SOURCES = {f"old-{i}.md": 10 for i in range(3)}
NEW_SOURCES = {**OLD_SOURCES, "old-1.md": 4, "new.md": 7}  # one source changed, one added


def vector(text: str) -> list[float]:
    import hashlib
    import random

    rng = random.Random(hashlib.sha256(text.encode()).hexdigest())
    return [rng.uniform(-1, 1) for _ in range(8)]


def build(layout: dict[str, int]) -> RagIndex:
    from haystack import Document

    index = RagIndex(embedder="fake", dim=8)
    for source, n in layout.items():
        texts = [f"{source} chunk {i} about rivers {n}" for i in range(n)]
        index.add([Document(content=t, meta={"source": source}, embedding=vector(t)) for t in texts], source_hashes={source: f"h{n}"})
    return index


def state(index_dir: Path) -> dict[str, int] | None:
    """{source: chunks} of what loads, checked for internal consistency; None if no index."""
    try:
        index = RagIndex.load(index_dir)
    except IndexNotFoundError:
        return None
    counts = {s: info.chunks for s, info in index.sources.items()}
    assert sum(counts.values()) == len(index) == len(index.sparse_search("rivers", 10_000))
    assert len(index.dense_search(vector("query"), 10_000)) == len(index)
    return counts


def make_flat(index_dir: Path) -> None:
    """Turn a saved index into the layout ragkit wrote before versioned folders."""
    live = RagIndex.live_dir(index_dir)
    for entry in live.iterdir():
        shutil.move(str(entry), index_dir / entry.name)
    shutil.rmtree(index_dir / "versions")
    (index_dir / "CURRENT").unlink()


def template(tmp_path: Path, scenario: str) -> Path:
    folder = tmp_path / f"template-{scenario}" / "idx"
    folder.parent.mkdir()
    if scenario != "fresh":
        build(OLD_SOURCES).save(folder)
        (folder / "sentence_vectors-fake.npz").write_bytes(b"a cache kept beside the index")
        if scenario == "flat":
            make_flat(folder)
    return folder


RUNNER = """
import json, os, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import test_index_crash_safety as t
from ragkit.index import versions
work, labels = Path(sys.argv[2]), json.loads(sys.argv[3])
new = t.build(t.NEW_SOURCES)
new._refresh_sparse()  # all work that could start threads happens before the forks
killed = {}
for i, label in enumerate(labels):
    pid = os.fork()
    if pid == 0:
        versions._FAULT_HOOK = lambda at, label=label: os.kill(os.getpid(), signal.SIGKILL) if at == label else None
        new.save(work / f"case{i}" / "idx")
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    killed[label] = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
print(json.dumps(killed))
"""


@pytest.mark.parametrize("scenario", ["versioned", "flat", "fresh"])
def test_a_save_killed_at_any_point_leaves_the_old_or_the_new_index(tmp_path, scenario, monkeypatch):
    source = template(tmp_path, scenario)
    labels: list[str] = []
    probe = tmp_path / "probe" / "idx"
    if scenario != "fresh":
        shutil.copytree(source.parent, probe.parent)
    monkeypatch.setattr(versions, "_FAULT_HOOK", labels.append)
    build(NEW_SOURCES).save(probe)
    monkeypatch.setattr(versions, "_FAULT_HOOK", None)
    assert len(labels) >= 14 and "CURRENT: renamed" in labels
    if scenario == "flat":
        assert "legacy manifest.json: removed" in labels
    if scenario == "versioned":
        assert any(label.startswith("old version") for label in labels)

    work = tmp_path / "work"
    for i in range(len(labels)):
        if scenario == "fresh":
            (work / f"case{i}").mkdir(parents=True)
        else:
            shutil.copytree(source.parent, work / f"case{i}")
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(HERE), str(work), json.dumps(labels)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    killed = json.loads(done.stdout.strip().splitlines()[-1])
    assert killed == {label: True for label in labels}  # every point was reached, and died there

    old = None if scenario == "fresh" else OLD_SOURCES
    outcomes = []
    for i, label in enumerate(labels):
        idx = work / f"case{i}" / "idx"
        after_crash = state(idx)
        assert after_crash in (old, NEW_SOURCES), f"killed at {label!r}: loaded {after_crash}"
        outcomes.append(after_crash == NEW_SOURCES)
        # the next writer works, keeps what was there, and removes the crash's leftovers
        index = RagIndex.load(idx) if after_crash else RagIndex(embedder="fake", dim=8)
        index.add([replace(d, embedding=vector(d.content)) for d in build({"later.md": 2}).chunks.values()])
        index.save(idx)
        assert state(idx) == {**(after_crash or {}), "later.md": 2}, label
        assert len(list((idx / "versions").iterdir())) == 1 and not (idx / "manifest.json").exists(), label
        if scenario != "fresh":
            assert (idx / "sentence_vectors-fake.npz").is_file(), label
    # points before the manifest is in place give the old index; from there on, the new one
    assert outcomes == sorted(outcomes) and outcomes[-1] is True and outcomes[0] is False


def test_a_complete_version_newer_than_current_is_recovered_and_a_half_written_one_ignored(tmp_path):
    idx = tmp_path / "idx"
    build(OLD_SOURCES).save(idx)
    live = RagIndex.live_dir(idx)
    # a crash after the new version was complete but before CURRENT moved
    newer = idx / "versions" / f"{int(live.name) + 1:010d}"
    build(NEW_SOURCES).save(tmp_path / "elsewhere")
    shutil.copytree(RagIndex.live_dir(tmp_path / "elsewhere"), newer)
    assert state(idx) == NEW_SOURCES
    # a half-written one (no manifest) is never read, and the next save removes it
    half = idx / "versions" / f"{int(newer.name) + 1:010d}"
    shutil.copytree(newer, half)
    (half / "manifest.json").unlink()
    assert state(idx) == NEW_SOURCES
    (idx / "CURRENT").unlink()
    assert RagIndex.exists(idx) and state(idx) == NEW_SOURCES
    RagIndex.load(idx).save(idx)
    assert [p.name for p in (idx / "versions").iterdir()] == [RagIndex.live_dir(idx).name] and state(idx) == NEW_SOURCES


def test_a_flat_index_from_before_loads_and_its_next_save_converts_it(tmp_path):
    idx = tmp_path / "idx"
    build(OLD_SOURCES).save(idx)
    make_flat(idx)
    assert (idx / "manifest.json").is_file() and RagIndex.exists(idx) and RagIndex.live_dir(idx) == idx
    index = RagIndex.load(idx)
    assert index.path == idx and state(idx) == OLD_SOURCES
    index.save(idx)
    assert (idx / "CURRENT").is_file() and not (idx / "manifest.json").exists() and not (idx / "sparse").exists()
    assert state(idx) == OLD_SOURCES


def _load_while_other_processes_save(idx, monkeypatch, saves: int) -> tuple[RagIndex, list[str]]:
    """Load ``idx`` while another process saves (and prunes the version being read) during each of the
    first ``saves`` loads: NEW_SOURCES, OLD_SOURCES, NEW_SOURCES, …; the version folders read, in order."""
    real = RagIndex._load_folder.__func__
    calls = []

    def save_in_between(cls, folder, path, expected):
        calls.append(folder.name)
        if len(calls) <= saves:
            build(NEW_SOURCES if len(calls) % 2 else OLD_SOURCES).save(idx)
        return real(cls, folder, path, expected)

    monkeypatch.setattr(RagIndex, "_load_folder", classmethod(save_in_between))
    return RagIndex.load(idx), calls


def test_a_reader_whose_version_is_removed_mid_read_retries_on_the_new_one(tmp_path, monkeypatch):
    idx = tmp_path / "idx"
    build(OLD_SOURCES).save(idx)
    loaded, calls = _load_while_other_processes_save(idx, monkeypatch, saves=1)
    assert len(calls) == 2 and calls[0] != calls[1]
    assert {s: i.chunks for s, i in loaded.sources.items()} == NEW_SOURCES


def test_a_reader_overtaken_by_many_saves_in_a_row_still_loads(tmp_path, monkeypatch):
    # a writer saving back to back on a loaded machine can land a save inside several loads in a row
    idx = tmp_path / "idx"
    build(OLD_SOURCES).save(idx)
    loaded, calls = _load_while_other_processes_save(idx, monkeypatch, saves=12)
    assert len(calls) == 13 and len(set(calls)) == 13
    assert {s: i.chunks for s, i in loaded.sources.items()} == OLD_SOURCES


def test_a_reader_a_writer_never_lets_finish_gets_a_clear_error_after_its_budget(tmp_path, monkeypatch):
    from ragkit.index import store_files
    from ragkit.index.store import IndexCorruptedError

    idx = tmp_path / "idx"
    build(OLD_SOURCES).save(idx)
    real = RagIndex._load_folder.__func__

    def always_overtaken(cls, folder, path, expected):
        build(OLD_SOURCES).save(idx)
        return real(cls, folder, path, expected)

    monkeypatch.setattr(store_files, "_LOAD_RETRY_BUDGET_S", 0.3)
    monkeypatch.setattr(RagIndex, "_load_folder", classmethod(always_overtaken))
    with pytest.raises(IndexCorruptedError, match="kept changing while it was read"):
        RagIndex.load(idx)


def test_a_corrupted_live_version_is_still_reported_not_retried_away(tmp_path):
    from ragkit.index.store import IndexCorruptedError

    idx = tmp_path / "idx"
    build(OLD_SOURCES).save(idx)
    target = RagIndex.live_dir(idx) / "dense.faiss"
    target.write_bytes(target.read_bytes()[:-10])
    with pytest.raises(IndexCorruptedError, match="dense.faiss"):
        RagIndex.load(idx)
