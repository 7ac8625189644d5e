"""Does a server store retrieve what the local index retrieves? PostgreSQL + pgvector against the local
FAISS + bm25s index, on SQuAD v1.1 dev and SQuAD-Shifts new_wiki (every paragraph one chunk).

The local index is migrated into a PostgreSQL started here (:func:`ragkit.index.servers.start_postgres`,
127.0.0.1, stopped by its pid) with :func:`ragkit.index.pgvector_index.migrate` (the vectors copied,
not re-embedded); then for ``--questions`` questions (seed 0), each embedded once:

* ``dense_overlap@10``: the share of the local exact top-10 that pgvector's HNSW top-10 holds (mean);
* ``mrr@10`` per mode (dense, sparse, hybrid) on each store — the gold paragraph's reciprocal rank,
  the local index's ``retrieval_squad.py`` measure — and the hybrid difference;
* ``fulltext_empty``: questions whose PostgreSQL full-text search (Haystack's ``PgvectorKeywordRetriever``,
  ``sparse="fulltext"``, reported as ``pgvector-fulltext``) found nothing: it ANDs the words; ragkit's
  BM25 postings (``sparse="bm25"``, the default, reported as ``pgvector``) do not;
* filtered searches: ``top_k=10`` restricted to the sources holding ~10 % and ~1 % of the chunks, the
  mean number of results each store returned (every filter admits ≥ 10 chunks) and the overlap;
* ``migrate_s`` and the p50 milliseconds of a dense and a hybrid search on each store (one client).

Writes ``bench/results/store_parity.json`` (read, update, write: one entry per set).

    .venv/bin/python bench/store_parity.py --set squad_dev --questions 500
    .venv/bin/python bench/store_parity.py --set new_wiki --questions 500
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time

from answer_quality import SETS
from squad_common import CACHE, ROOT, run_facts

OUT = ROOT / "bench" / "results" / "store_parity.json"


def reciprocal_rank(documents, doc_id: str, k: int = 10) -> float:
    for rank, d in enumerate(documents[:k], 1):
        if d.id == doc_id:
            return 1.0 / rank
    return 0.0


def filter_for(local, share: float, rng: random.Random) -> tuple[dict, int]:
    """A ``{"source": [...]}`` filter admitting about ``share`` of the chunks (sources drawn at random)."""
    sources = sorted(local.sources.items())
    rng.shuffle(sources)
    chosen, held, want = [], 0, max(int(len(local) * share), 10)
    for name, info in sources:
        if held >= want:
            break
        chosen.append(name)
        held += info.chunks
    return {"source": chosen}, held


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", default="squad_dev", choices=["squad_dev", "new_wiki"])
    parser.add_argument("--questions", type=int, default=500)
    args = parser.parse_args()

    from ragkit.config import ModelConfig
    from ragkit.eval.experiments import index_documents, load_squad_corpus
    from ragkit.index.pgvector_index import PgvectorIndex, migrate
    from ragkit.index.retrieval import HybridRetriever
    from ragkit.index.servers import start_postgres

    docs, questions = load_squad_corpus(SETS[args.set])
    local = index_documents(docs, CACHE / f"{args.set}_index_all-MiniLM-L6-v2")
    rng = random.Random(0)
    asked = rng.sample(questions, min(args.questions, len(questions)))
    local_retriever = HybridRetriever(local, ModelConfig(embedder=local.embedder))
    with tempfile.TemporaryDirectory(prefix="ragkit-store-parity-") as folder, start_postgres(folder) as server:
        store = PgvectorIndex(server.url, embedder=local.embedder, dim=local.dim)
        t0 = time.perf_counter()
        counts = migrate(local, store)
        migrate_s = time.perf_counter() - t0
        fulltext = PgvectorIndex(server.url, embedder=local.embedder, dim=local.dim, sparse="fulltext")
        store_retriever = HybridRetriever(store, ModelConfig(embedder=local.embedder), embedder=local_retriever.embedder)
        fulltext_retriever = HybridRetriever(fulltext, ModelConfig(embedder=local.embedder), embedder=local_retriever.embedder)
        overlap, rr, ms, empty = [], {}, {}, 0
        for q in asked:
            vector = local_retriever.embed(q["question"])
            exact = [d.id for d in local.dense_search(vector, 10)]
            t = time.perf_counter()
            served = store.dense_search(vector, 10)
            ms.setdefault("dense/pgvector", []).append((time.perf_counter() - t) * 1000)
            overlap.append(len(set(exact) & {d.id for d in served}) / max(len(exact), 1))
            for name, retriever in (("local", local_retriever), ("pgvector", store_retriever), ("pgvector-fulltext", fulltext_retriever)):
                for mode in (("dense", "sparse", "hybrid") if name != "pgvector-fulltext" else ("sparse", "hybrid")):
                    t = time.perf_counter()
                    found = retriever.retrieve(q["question"], top_k=10, mode=mode, query_embedding=vector).documents
                    ms.setdefault(f"{mode}/{name}", []).append((time.perf_counter() - t) * 1000)
                    rr.setdefault(f"{mode}/{name}", []).append(reciprocal_rank(found, q["doc_id"]))
                    empty += name == "pgvector-fulltext" and mode == "sparse" and not found
        filtered = {}
        for share in (0.10, 0.01):
            filters, admitted = filter_for(local, share, random.Random(int(share * 1000)))
            got_local, got_store, same = [], [], []
            for q in asked[:100]:
                vector = local_retriever.embed(q["question"])
                a = local.dense_search(vector, 10, filters=filters)
                b = store.dense_search(vector, 10, filters=filters)
                got_local.append(len(a))
                got_store.append(len(b))
                same.append(len({d.id for d in a} & {d.id for d in b}) / max(len(a), 1))
            filtered[f"{share:.0%}"] = {"admitted_chunks": admitted, "sources": len(filters["source"]), "top_k": 10,
                                        "returned_local": statistics.mean(got_local), "returned_pgvector": statistics.mean(got_store),
                                        "overlap": round(statistics.mean(same), 4), "questions": len(got_local)}
    mrr = {key: round(statistics.mean(v), 4) for key, v in rr.items()}
    entry = {
        "chunks": len(local), "questions": len(asked), "migrate": {**counts, "seconds": round(migrate_s, 2)},
        "dense_overlap@10": round(statistics.mean(overlap), 4), "mrr@10": mrr,
        "hybrid_mrr_difference": round(mrr["hybrid/pgvector"] - mrr["hybrid/local"], 4),
        "fulltext_empty": round(empty / len(asked), 4), "filtered": filtered,
        "p50_ms": {key: round(statistics.median(v), 2) for key, v in ms.items()},
        "settings": {"pgvector": "BM25 postings (ragkit, bm25s's lucene formula); HNSW (m 16, ef_construction 64: the integration's defaults), hnsw.ef_search 200, hnsw.iterative_scan strict_order",
                     "local": "FAISS flat (exact) below 50k chunks; bm25s"},
    }
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data[args.set] = entry
    data.setdefault("commands", {})[args.set] = "python bench/store_parity.py " + " ".join(sys.argv[1:])
    data.setdefault("run", {})[args.set] = run_facts()
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(entry, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
