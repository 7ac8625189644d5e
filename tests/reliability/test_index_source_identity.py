"""One name per file whatever path is passed, --remove-missing limited to that path, dry runs,
and names that used to fail the save after all the embedding (a fake embedder keeps these fast)."""

import hashlib
import json
import os
import random
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

import ragkit.index.indexer as indexer
from ragkit.index.indexer import build_index
from ragkit.index.store import RagIndex
from ragkit.ui.cli import main

pytestmark = pytest.mark.fault("data_loss")
SAMPLE_DOCS = Path(__file__).resolve().parents[2] / "sample_docs"


class FakeEmbedder:
    """build_document_embedder's interface with hash vectors: no model load, and it counts calls."""

    calls = 0

    def __init__(self, *args, **kwargs):
        self.embedding_backend = SimpleNamespace(model=SimpleNamespace(get_sentence_embedding_dimension=lambda: 8))

    def warm_up(self):
        pass

    def run(self, documents):
        FakeEmbedder.calls += 1
        return {"documents": [replace(doc, embedding=self.vector(doc.content or "")) for doc in documents]}

    @staticmethod
    def vector(text: str) -> list[float]:
        rng = random.Random(hashlib.sha256(text.encode()).hexdigest())
        return [rng.uniform(-1, 1) for _ in range(8)]


@pytest.fixture(autouse=True)
def fake_embedder(monkeypatch):
    FakeEmbedder.calls = 0
    monkeypatch.setattr(indexer, "build_document_embedder", FakeEmbedder)


@pytest.fixture
def docs(tmp_path):
    folder = tmp_path / "docs"
    shutil.copytree(SAMPLE_DOCS / "wikipedia", folder / "wikipedia")
    shutil.copy(SAMPLE_DOCS / "notes.txt", folder / "notes.txt")
    return folder


def sources(index_dir) -> set[str]:
    return set(RagIndex.load(index_dir).sources)


def test_indexing_a_subfolder_after_its_parent_keeps_one_name_per_file(docs, tmp_path):
    idx = tmp_path / "idx"
    first = build_index(docs, idx, progress=False)
    assert len(first.added) == 7 and "wikipedia/Rhine.md" in first.added
    (docs / "wikipedia" / "Rhine.md").write_text("# Rhine\n\nThe Rhine now carries barges.\n")
    again = build_index(docs / "wikipedia", idx, progress=False)
    assert again.added == ["wikipedia/Rhine.md"] and len(again.unchanged) == 5
    single = build_index(docs / "wikipedia" / "Rhine.md", idx, progress=False)
    assert single.unchanged == ["wikipedia/Rhine.md"] and single.added == []
    assert sources(idx) == set(first.added)
    assert RagIndex.load(idx).root == str(docs.resolve())


def test_remove_missing_only_removes_sources_under_the_path_given(docs, tmp_path):
    idx = tmp_path / "idx"
    build_index(docs, idx, progress=False)
    everything = sources(idx)
    report = build_index(docs / "notes.txt", idx, remove_missing=True, progress=False)
    assert report.removed == [] and sources(idx) == everything
    (docs / "wikipedia" / "Rhine.md").unlink()
    (docs / "notes.txt").unlink()
    report = build_index(docs / "wikipedia", idx, remove_missing=True, progress=False)
    assert report.removed == ["wikipedia/Rhine.md"]  # notes.txt is gone too, but it is not under wikipedia/
    assert sources(idx) == everything - {"wikipedia/Rhine.md"}


def test_a_folder_outside_the_root_is_named_absolutely_and_never_clashes(docs, tmp_path):
    idx = tmp_path / "idx"
    build_index(docs / "wikipedia", idx, progress=False)
    other = tmp_path / "other"
    other.mkdir()
    (other / "Rhine.md").write_text("# Another Rhine\n\nA different file with the same name.\n")
    report = build_index(other, idx, remove_missing=True, progress=False)
    assert report.added == [str(other.resolve() / "Rhine.md")] and report.removed == []
    assert {"Rhine.md", str(other.resolve() / "Rhine.md")} <= sources(idx)


def test_an_index_without_a_recorded_root_adopts_the_folder_its_sources_are_under(docs, tmp_path):
    idx = tmp_path / "idx"
    build_index(docs, idx, progress=False)
    legacy = RagIndex.load(idx)
    legacy.root = None  # as written before roots were recorded
    legacy.save(idx)
    report = build_index(docs / "wikipedia", idx, progress=False)
    assert report.added == [] and len(report.unchanged) == 6
    assert RagIndex.load(idx).root == str(docs.resolve()) and len(sources(idx)) == 7


def test_dry_run_reports_and_changes_nothing(docs, tmp_path):
    idx = tmp_path / "idx"
    plan = build_index(docs, idx, progress=False, dry_run=True)
    assert plan.dry_run and len(plan.added) == 7 and not idx.exists() and FakeEmbedder.calls == 0
    build_index(docs, idx, progress=False)
    before = (RagIndex.live_dir(idx) / "manifest.json").read_bytes()
    (docs / "wikipedia" / "Rhine.md").unlink()
    (docs / "wikipedia" / "Yuan_dynasty.md").write_text("# Yuan\n\nChanged.\n")
    plan = build_index(docs, idx, remove_missing=True, progress=False, dry_run=True)
    assert plan.removed == ["wikipedia/Rhine.md"] and plan.added == ["wikipedia/Yuan_dynasty.md"]
    assert (RagIndex.live_dir(idx) / "manifest.json").read_bytes() == before and "wikipedia/Rhine.md" in sources(idx)


def test_the_cli_names_what_remove_missing_removes_and_escapes_paths(docs, tmp_path, capsys):
    draft = docs / "[draft]"
    draft.mkdir()
    (draft / "plan.md").write_text("# Plan\n\nA draft about [bold]markup[/bold].\n")
    idx = str(tmp_path / "idx")
    assert main(["index", str(docs), "--index-dir", idx, "--quiet"]) == 0
    assert "Indexed 8 file(s)" in capsys.readouterr().out
    (draft / "plan.md").unlink()
    (draft / "empty.md").write_text("")
    assert main(["index", str(docs), "--index-dir", idx, "--quiet", "--remove-missing", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would remove [draft]/plan.md" in out and "skipped [draft]/empty.md: empty file" in out
    assert "[draft]/plan.md" in sources(idx)
    assert main(["index", str(docs), "--index-dir", idx, "--quiet", "--remove-missing"]) == 0
    out = capsys.readouterr().out
    assert "removing 1 source(s)" in out and "removed 1 source(s): [draft]/plan.md" in out
    assert "[draft]/plan.md" not in sources(idx)


def test_a_non_utf8_file_name_is_indexed_and_saved_not_lost_after_embedding(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    with open(os.path.join(os.fsencode(folder), b"bad\xffbyte.md"), "wb") as fh:
        fh.write(b"The Rhine carries barges to Rotterdam.\n")
    (folder / "fine.md").write_text("Basel lies on the Rhine.\n")
    report = build_index(folder, tmp_path / "idx", progress=False)
    assert report.added == ["bad\\xffbyte.md", "fine.md"] and report.skipped == []
    again = build_index(folder, tmp_path / "idx", progress=False)
    assert again.unchanged == ["bad\\xffbyte.md", "fine.md"]  # the same name every run
    line = (RagIndex.live_dir(tmp_path / "idx") / "chunks.jsonl").read_bytes().splitlines()[0]
    assert json.loads(line.decode("utf-8"))["meta"]["source"] in {"bad\\xffbyte.md", "fine.md"}


def test_unstorable_chunks_are_refused_before_anything_changes():
    from haystack import Document

    index = RagIndex(embedder="fake", dim=8)
    bad = Document(content="text", meta={"source": "bad\udcffname.md"}, embedding=[0.1] * 8)
    with pytest.raises(ValueError, match="UTF-8"):
        index.add([Document(content="fine", meta={"source": "ok.md"}, embedding=[0.2] * 8), bad])
    assert len(index) == 0 and index.sources == {}


def test_build_index_shows_conversion_progress_when_asked(docs, tmp_path, capfd):
    build_index(docs / "wikipedia", tmp_path / "idx", progress=True)
    assert "converting" in capfd.readouterr().err  # 3,000 files took ~100 s with no sign of life
    build_index(docs / "wikipedia", tmp_path / "idx", progress=False)
    assert "converting" not in capfd.readouterr().err
