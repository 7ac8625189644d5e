"""Milvus as ragkit's store, against milvus-lite's gRPC server started here (no mock): what is checked is
the store — dense search against the local exact index, BM25 scored as the local bm25s scores it,
filters that still return top_k, deletes, and the collection's owner record. Random unit vectors."""

from __future__ import annotations

import tempfile

import numpy as np
import pytest
from haystack import Document

from ragkit.index.milvus_index import MilvusIndex
from ragkit.index.servers import pid_alive, start_milvus
from ragkit.index.stores import migrate, open_store
from ragkit.index.versions import EmbedderMismatchError
from test_pgvector_store import DIM, local_index

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def server():
    with start_milvus(tempfile.mkdtemp(prefix="ragkit-milvus-test-")) as running:
        yield running
    assert not pid_alive(running.pid)


def store_for(server, name: str) -> MilvusIndex:
    return open_store(f"{server.url}?collection={name}", embedder="test-embedder", dim=DIM)


def test_server_listens_on_loopback_and_the_url_names_the_collection(server):
    assert server.url.startswith("milvus://127.0.0.1:")
    store = store_for(server, "named")
    assert store.location == f"{server.url}?collection=named" and store.uri.startswith("http://127.0.0.1:")


def test_dense_search_matches_the_local_exact_index(server):
    local = local_index(seed=1)
    store = store_for(server, "dense")
    assert migrate(local, store) == {"chunks": 120, "written": 120, "in_store": 120}
    rng = np.random.default_rng(7)
    for _ in range(20):
        query = rng.normal(size=DIM)
        expected, found = local.dense_search(query, 10), store.dense_search(query, 10)
        assert [d.id for d in found] == [d.id for d in expected]
        assert found[0].score == pytest.approx(expected[0].score, abs=1e-4)
        assert found[0].content == expected[0].content and "ragkit_content" not in found[0].meta


def test_bm25_on_the_server_scores_as_the_local_bm25s(server):
    local = local_index(n_sources=30, per_source=4, seed=8)
    store = store_for(server, "bm25")
    migrate(local, store)
    for query in ("tesla motor", "where did the rhine port canal go", "python exception queue list", "khan"):
        expected, found = local.sparse_search(query, 10), store.sparse_search(query, 10)
        assert [round(d.score, 3) for d in found] == pytest.approx([round(d.score, 3) for d in expected], abs=2e-3)
    assert store.sparse_search("zeppelin", 5) == []
    assert store.term_weights("tesla zeppelin").keys() == {"tesla"}
    assert store.term_weights("tesla")["tesla"] == pytest.approx(local.term_weights("tesla")["tesla"])


def test_filtered_search_returns_top_k_and_deletes_go_everywhere(server):
    local = local_index(n_sources=60, per_source=5, seed=2)
    store = store_for(server, "filters")
    migrate(local, store)
    query = np.random.default_rng(3).normal(size=DIM)
    found = store.dense_search(query, 10, filters={"source": ["doc7.txt", "doc8.txt"]})  # 10 of 300 chunks
    assert len(found) == 10 and {d.meta["source"] for d in found} == {"doc7.txt", "doc8.txt"}
    assert all(d.meta["collection"] == "wiki" for d in store.sparse_search("tesla", 10, filters={"collection": ["wiki"]}))
    assert store.delete_source("doc7.txt") == 5
    assert "doc7.txt" not in store.sources and len(store) == 295
    assert not [d for d in store.sparse_search("tesla motor rhine", 50) if d.meta["source"] == "doc7.txt"]
    chunk = Document(id="new-1", content="a new chunk about the zeppelin", embedding=[1.0] + [0.0] * (DIM - 1), meta={"source": "doc99.txt"})
    assert store.add([chunk], source_hashes={"doc99.txt": "sha99"}) == 1
    assert store.sources["doc99.txt"].sha256 == "sha99" and store.sparse_search("zeppelin", 1)[0].id == "new-1"
    assert store.move_sources({"doc99.txt": "airships"}) == 1 and store.collection_counts()["airships"] == 1


def test_another_embedders_collection_is_refused(server):
    store_for(server, "owned").open()
    with pytest.raises(EmbedderMismatchError, match="holds vectors from test-embedder, not other"):
        open_store(f"{server.url}?collection=owned", embedder="other", dim=DIM)
    with pytest.raises(EmbedderMismatchError, match="holds 16-d vectors from test-embedder"):
        MilvusIndex(server.url.replace("milvus://", "http://"), collection="owned", embedder="test-embedder", dim=32).open()
