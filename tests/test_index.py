import json
from dataclasses import replace

import faiss
import pytest

from conftest import fake_embedding, make_chunks
from ragkit.components import BM25sRetriever, FaissRetriever
from ragkit.index.store import (
    EmbedderMismatchError,
    IndexCorruptedError,
    IndexNotFoundError,
    IndexVersionError,
    RagIndex,
)

RHINE = ["The Rhine flows north into the North Sea.", "Basel is a city on the Rhine."]
TESLA = ["Tesla was born in Smiljan.", "Tesla worked for Edison in New York."]


@pytest.fixture
def index():
    idx = RagIndex(embedder="fake", dim=8)
    idx.add(make_chunks("rhine.md", RHINE), source_hashes={"rhine.md": "h1"})
    idx.add(make_chunks("tesla.md", TESLA), source_hashes={"tesla.md": "h2"})
    return idx


def test_dense_and_sparse_search(index):
    query = fake_embedding(TESLA[0])
    best = index.dense_search(query, top_k=1)[0]
    assert best.content == TESLA[0] and best.score == pytest.approx(1.0, abs=1e-5)
    sparse = index.sparse_search("where was tesla born", top_k=3)
    assert sparse[0].content == TESLA[0] and sparse[0].score > 0
    assert index.sparse_search("zebra quantum", top_k=3) == []  # unknown words: explicit empty result
    assert len(index.dense_search(query, top_k=100)) == 4  # top_k above the size is clamped


def test_save_load_round_trip_keeps_everything(index, tmp_path):
    index.save(tmp_path / "idx")
    again = RagIndex.load(tmp_path / "idx")
    assert len(again) == 4 and set(again.sources) == {"rhine.md", "tesla.md"}
    assert again.sources["tesla.md"].sha256 == "h2"
    q = fake_embedding(RHINE[1])
    assert [d.id for d in again.dense_search(q, 4)] == [d.id for d in index.dense_search(q, 4)]
    assert [d.id for d in again.sparse_search("rhine basel", 4)] == [d.id for d in index.sparse_search("rhine basel", 4)]


def test_incremental_add_and_delete_by_source(index, tmp_path):
    index.save(tmp_path / "idx")
    idx = RagIndex.load(tmp_path / "idx")
    idx.add(make_chunks("new.md", ["Genghis Khan founded the Mongol Empire."]))
    assert idx.delete_source("tesla.md") == 2
    idx.save(tmp_path / "idx")
    again = RagIndex.load(tmp_path / "idx")
    assert set(again.sources) == {"rhine.md", "new.md"} and len(again) == 3
    assert all(d.meta["source"] != "tesla.md" for d in again.dense_search(fake_embedding(TESLA[0]), 10))
    assert again.sparse_search("tesla", 5) == []
    assert again.sparse_search("mongol empire", 5)[0].meta["source"] == "new.md"


def test_a_bad_batch_changes_nothing(index):
    bad = make_chunks("x.md", ["fine", "wrong size"])
    bad[1] = replace(bad[1], embedding=[0.1] * 3)
    with pytest.raises(EmbedderMismatchError):
        index.add(bad)
    duplicate = make_chunks("rhine.md", RHINE[:1])
    with pytest.raises(ValueError, match="already in the index"):
        index.add(duplicate)
    assert len(index) == 4 and "x.md" not in index.sources


def test_corrupted_files_are_refused_with_a_clear_message(index, tmp_path):
    index.save(tmp_path / "idx")
    target = RagIndex.live_dir(tmp_path / "idx") / "dense.faiss"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(IndexCorruptedError, match="dense.faiss.*rebuild"):
        RagIndex.load(tmp_path / "idx")


def test_truncated_chunk_table_is_refused(index, tmp_path):
    index.save(tmp_path / "idx")
    chunks = RagIndex.live_dir(tmp_path / "idx") / "chunks.jsonl"
    chunks.write_text(chunks.read_text().splitlines()[0] + "\n")
    with pytest.raises(IndexCorruptedError):
        RagIndex.load(tmp_path / "idx")


def test_garbage_manifest_and_version_mismatch(index, tmp_path):
    index.save(tmp_path / "idx")
    manifest = RagIndex.live_dir(tmp_path / "idx") / "manifest.json"
    data = json.loads(manifest.read_text())
    data["format_version"] = 99
    manifest.write_text(json.dumps(data))
    with pytest.raises(IndexVersionError, match="format version 99.*Rebuild"):
        RagIndex.load(tmp_path / "idx")
    manifest.write_bytes(b"\xff\xfe not json")
    with pytest.raises(IndexCorruptedError):
        RagIndex.load(tmp_path / "idx")


def test_missing_index_and_embedder_mismatch(index, tmp_path):
    with pytest.raises(IndexNotFoundError, match="ragkit index"):
        RagIndex.load(tmp_path / "nothing")
    index.save(tmp_path / "idx")
    with pytest.raises(EmbedderMismatchError, match="fake"):
        RagIndex.load(tmp_path / "idx", expected_embedder="all-MiniLM-L6-v2")
    with pytest.raises(EmbedderMismatchError):
        index.dense_search([0.0] * 5, 3)


def test_a_failed_save_keeps_the_previous_index(index, tmp_path, monkeypatch):
    index.save(tmp_path / "idx")
    index.add(make_chunks("extra.md", ["More text about rivers."]))

    def broken_write(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(faiss, "write_index", broken_write)
    with pytest.raises(OSError):
        index.save(tmp_path / "idx")
    again = RagIndex.load(tmp_path / "idx")
    assert len(again) == 4 and "extra.md" not in again.sources
    assert [p.name for p in tmp_path.iterdir()] == ["idx"]  # no temporary folder left behind


def test_empty_index_searches_return_nothing_and_persist(tmp_path):
    idx = RagIndex(embedder="fake", dim=8)
    assert idx.dense_search(fake_embedding("x"), 5) == [] and idx.sparse_search("x", 5) == []
    idx.save(tmp_path / "empty")
    assert len(RagIndex.load(tmp_path / "empty")) == 0


def test_retriever_components_round_trip_through_to_dict(index, tmp_path):
    index.save(tmp_path / "idx")
    for cls, run in ((FaissRetriever, {"query_embedding": fake_embedding(TESLA[1])}), (BM25sRetriever, {"query": "Edison New York"})):
        component = cls(index=RagIndex.load(tmp_path / "idx"), top_k=2)
        data = component.to_dict()
        assert data["init_parameters"] == {"index_path": str(tmp_path / "idx"), "top_k": 2}
        again = cls.from_dict(data)
        again.warm_up()
        docs = again.run(**run)["documents"]
        assert len(docs) in (1, 2) and docs[0].content == TESLA[1]


def test_in_memory_index_cannot_be_serialized(index):
    with pytest.raises(ValueError, match="save it first"):
        BM25sRetriever(index=index).to_dict()


def test_hnsw_index_searches_deletes_and_persists(tmp_path):
    texts = [f"chunk number {i} about topic {i % 7}" for i in range(300)]
    idx = RagIndex(embedder="fake", dim=8, dense_index="hnsw")
    idx.add(make_chunks("a.md", texts[:200]))
    idx.add(make_chunks("b.md", texts[200:]))
    assert idx.is_hnsw
    exact = RagIndex(embedder="fake", dim=8, dense_index="flat")
    exact.add(make_chunks("a.md", texts[:200]))
    exact.add(make_chunks("b.md", texts[200:]))
    q = fake_embedding("query")
    assert [d.id for d in idx.dense_search(q, 5)] == [d.id for d in exact.dense_search(q, 5)]
    assert idx.delete_source("b.md") == 100 and idx.is_hnsw
    assert all(d.meta["source"] == "a.md" for d in idx.dense_search(q, 50))
    idx.save(tmp_path / "h")
    again = RagIndex.load(tmp_path / "h")
    assert again.is_hnsw and len(again) == 200 and again.dense_search(q, 3)[0].id == idx.dense_search(q, 3)[0].id


def test_auto_index_switches_to_hnsw_past_the_threshold(monkeypatch):
    import ragkit.index.store as index_module

    monkeypatch.setattr(index_module, "HNSW_THRESHOLD", 50)
    idx = RagIndex(embedder="fake", dim=8)
    idx.add(make_chunks("a.md", [f"text {i}" for i in range(40)]))
    assert not idx.is_hnsw
    idx.add(make_chunks("b.md", [f"more {i}" for i in range(40)]))
    assert idx.is_hnsw and len(idx.dense_search(fake_embedding("text 3"), 80)) == 80
