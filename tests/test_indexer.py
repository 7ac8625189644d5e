"""Indexing folders incrementally with the real embedder."""

import shutil

import pytest

from conftest import SAMPLE_DOCS
from ragkit.index.store import RagIndex
from ragkit.index.indexer import build_index
from ragkit.index.ingest import IngestError

pytestmark = pytest.mark.integration


def test_incremental_indexing_skips_unchanged_replaces_changed_and_removes_missing(tmp_path, fast_config):
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLE_DOCS / "wikipedia", docs)
    first = build_index(docs, tmp_path / "idx", fast_config, progress=False)
    assert len(first.added) == 6 and first.total_chunks == first.chunks_added

    (docs / "Rhine.md").write_text("# Rhine\n\nThe Rhine is a river. It has a new paragraph about barges.\n")
    (docs / "Super_Bowl_50.md").unlink()
    (docs / "broken.txt").write_bytes(b"\x00binary")
    second = build_index(docs, tmp_path / "idx", fast_config, remove_missing=True, progress=False)
    assert second.added == ["Rhine.md"] and len(second.unchanged) == 4
    assert second.removed == ["Super_Bowl_50.md"]
    assert second.skipped == [("broken.txt", "binary file (NUL bytes), not text")]
    index = RagIndex.load(tmp_path / "idx")
    assert set(index.sources) == {"Amazon_rainforest.md", "Genghis_Khan.md", "Nikola_Tesla.md", "Rhine.md", "Yuan_dynasty.md"}
    assert index.sources["Rhine.md"].chunks == 1
    assert "barges" in index.sparse_search("barges", 1)[0].content


def test_a_folder_of_only_bad_files_leaves_the_index_untouched(tmp_path, fast_config):
    build_index(SAMPLE_DOCS / "notes.txt", tmp_path / "idx", fast_config, progress=False)
    before = (RagIndex.live_dir(tmp_path / "idx") / "manifest.json").read_bytes()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "empty.md").write_text("")
    report = build_index(bad, tmp_path / "idx", fast_config, progress=False)
    # bad/ lies outside the index's root (sample_docs/, where notes.txt is), so it is named absolutely
    assert report.added == [] and report.skipped == [(str(bad.resolve() / "empty.md"), "empty file")]
    assert (RagIndex.live_dir(tmp_path / "idx") / "manifest.json").read_bytes() == before
    with pytest.raises(IngestError):
        build_index(tmp_path / "missing", tmp_path / "idx", fast_config, progress=False)
    assert len(RagIndex.load(tmp_path / "idx")) > 0
