"""The reranker's sentence-vector cache: same vectors as embedding directly, computed once, safe on disk."""

import logging

import numpy as np
import pytest

from ragkit.llm.generators import shared_text_embedder
from ragkit.index.sentence_vectors import SentenceVectorCache, sentence_key

SENTENCES = ["Tesla was born in Smiljan.", "He moved to Graz to study.", "The Rhine flows into the North Sea."]


@pytest.fixture()
def cache():
    return SentenceVectorCache("all-MiniLM-L6-v2")  # a private one: the shared cache is process-wide


def test_vectors_match_direct_embedding_and_are_computed_once(cache):
    direct = np.asarray(shared_text_embedder("all-MiniLM-L6-v2").embedding_backend.embed(SENTENCES, normalize_embeddings=True))
    got = cache.vectors(SENTENCES)
    assert got.shape == direct.shape and np.allclose(got, direct, atol=2e-3)  # float16 storage
    assert cache.embedded == 3
    again = cache.vectors(list(reversed(SENTENCES)) + [SENTENCES[0]])
    assert cache.embedded == 3 and np.array_equal(again[0], got[2]) and np.array_equal(again[3], got[0])
    assert cache.precompute(SENTENCES + ["A new sentence."]) == 1 and len(cache) == 4


def test_save_and_load_round_trip_keeps_every_key(cache, tmp_path):
    cache.vectors(SENTENCES)
    # a digest ending in zero bytes must survive the file format (NumPy's bytes dtype strips them)
    odd_key = b"\x01" * 14 + b"\x00\x00"
    cache._add([odd_key], np.ones((1, cache._vectors.shape[1]), dtype=np.float32))
    path = tmp_path / "vectors.npz"
    cache.save(path)
    fresh = SentenceVectorCache("all-MiniLM-L6-v2")
    assert fresh.load(path) == 4 and odd_key in fresh._rows
    assert np.array_equal(fresh.vectors(SENTENCES), cache.vectors(SENTENCES)) and fresh.embedded == 0


def test_a_damaged_or_foreign_file_is_ignored_and_rebuilt(cache, tmp_path, caplog):
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(b"PK\x03\x04 not really a zip")
    other = SentenceVectorCache("some-other-embedder")
    other._add([sentence_key("x")], np.ones((1, 4), dtype=np.float32))
    foreign = tmp_path / "foreign.npz"
    other.save(foreign)
    with caplog.at_level(logging.WARNING, logger="ragkit.index.sentence_vectors"):
        assert cache.load(damaged) == 0 and cache.load(foreign) == 0
    assert "ignoring sentence-vector cache" in caplog.text and len(cache) == 0
    assert cache.vectors(SENTENCES[:1]).shape == (1, 384)  # and it still works


def test_file_name_is_safe_for_any_model_name(tmp_path):
    path = SentenceVectorCache.file_for(tmp_path, "../../etc/passwd")
    assert path.parent == tmp_path and "/" not in path.name


def test_reranker_prepare_fills_the_shared_cache_once():
    from haystack import Document

    from ragkit.components.reranker import Reranker

    docs = [Document(content="Prepared sentence one about Graz. Prepared sentence two about Smiljan.")]
    reranker = Reranker(backend="bi-encoder")
    assert reranker.prepare(docs) == 2 and reranker.prepare(docs) == 0
    out = reranker.run(query="Where is Smiljan?", documents=docs)
    assert out["documents"] and Reranker(backend="cross-encoder", model="x").prepare(docs) == 0
