"""Does a server store retrieve what the local index retrieves? PostgreSQL + pgvector and Milvus against
the local FAISS + bm25s index, on SQuAD v1.1 dev and SQuAD-Shifts new_wiki (every paragraph one chunk).

The local index is migrated into a PostgreSQL and a Milvus (milvus-lite's server) started here
(:mod:`ragkit.index.servers`, 127.0.0.1, stopped by their pids) with :func:`ragkit.index.stores.migrate`
(the vectors copied, not re-embedded); then for ``--questions`` questions (seed 0), each embedded once:

* ``dense_overlap@10``: the share of the local exact top-10 that each store's HNSW top-10 holds (mean);
* ``mrr@10`` per mode (dense, sparse, hybrid) on each store — the gold paragraph's reciprocal rank,
  the local index's ``retrieval_squad.py`` measure — and the hybrid difference;
* ``fulltext_empty``: questions whose PostgreSQL full-text search (Haystack's ``PgvectorKeywordRetriever``,
  ``sparse="fulltext"``, reported as ``pgvector-fulltext``) found nothing: it ANDs the words; ragkit's
  BM25 postings (``sparse="bm25"``, the default, reported as ``pgvector``) do not;
* filtered searches: ``top_k=10`` restricted to the sources holding ~10 % and ~1 % of the chunks, the
  mean number of results each store returned (every filter admits ≥ 10 chunks) and the overlap;
* ``migrate`` (counts, seconds) and the p50 milliseconds of each search on each store (one client).

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
    from ragkit.index.milvus_index import MilvusIndex
    from ragkit.index.pgvector_index import PgvectorIndex
    from ragkit.index.retrieval import HybridRetriever
    from ragkit.index.servers import start_milvus, start_postgres
    from ragkit.index.stores import migrate

    docs, questions = load_squad_corpus(SETS[args.set])
    local = index_documents(docs, CACHE / f"{args.set}_index_all-MiniLM-L6-v2")
    rng = random.Random(0)
    asked = rng.sample(questions, min(args.questions, len(questions)))
    local_retriever = HybridRetriever(local, ModelConfig(embedder=local.embedder))
    vectors = {q["question"]: local_retriever.embed(q["question"]) for q in asked}
    # two folders straight under /tmp: PostgreSQL's own user must be able to enter its one
    with tempfile.TemporaryDirectory(prefix="ragkit-parity-pg-") as pg_folder, tempfile.TemporaryDirectory(prefix="ragkit-parity-milvus-") as milvus_folder, \
            start_postgres(pg_folder) as postgres, start_milvus(milvus_folder) as milvus:
        stores = {"pgvector": PgvectorIndex(postgres.url, embedder=local.embedder, dim=local.dim),
                  "milvus": MilvusIndex.from_url(milvus.url, embedder=local.embedder, dim=local.dim)}
        migrations = {}
        for name, store in stores.items():
            t0 = time.perf_counter()
            counts = migrate(local, store)
            migrations[name] = {**counts, "seconds": round(time.perf_counter() - t0, 2)}
        # the same table read through PostgreSQL's full text (Haystack's keyword retriever) instead of BM25 postings
        fulltext = PgvectorIndex(postgres.url, embedder=local.embedder, dim=local.dim, sparse="fulltext")
        retrievers = {"local": local_retriever, **{name: HybridRetriever(store, ModelConfig(embedder=local.embedder), embedder=local_retriever.embedder)
                                                   for name, store in {**stores, "pgvector-fulltext": fulltext}.items()}}
        overlap, rr, ms, empty = {}, {}, {}, 0
        for q in asked:
            vector = vectors[q["question"]]
            exact = [d.id for d in local.dense_search(vector, 10)]
            for name, store in stores.items():
                t = time.perf_counter()
                served = store.dense_search(vector, 10)
                ms.setdefault(f"dense-search/{name}", []).append((time.perf_counter() - t) * 1000)
                overlap.setdefault(name, []).append(len(set(exact) & {d.id for d in served}) / max(len(exact), 1))
            for name, retriever in retrievers.items():
                for mode in (("dense", "sparse", "hybrid") if name != "pgvector-fulltext" else ("sparse", "hybrid")):
                    t = time.perf_counter()
                    found = retriever.retrieve(q["question"], top_k=10, mode=mode, query_embedding=vector).documents
                    ms.setdefault(f"{mode}/{name}", []).append((time.perf_counter() - t) * 1000)
                    rr.setdefault(f"{mode}/{name}", []).append(reciprocal_rank(found, q["doc_id"]))
                    empty += name == "pgvector-fulltext" and mode == "sparse" and not found
        filtered = {}
        for share in (0.10, 0.01):
            filters, admitted = filter_for(local, share, random.Random(int(share * 1000)))
            got, same = {"local": []}, {}
            for q in asked[:100]:
                vector = vectors[q["question"]]
                a = local.dense_search(vector, 10, filters=filters)
                got["local"].append(len(a))
                for name, store in stores.items():
                    b = store.dense_search(vector, 10, filters=filters)
                    got.setdefault(name, []).append(len(b))
                    same.setdefault(name, []).append(len({d.id for d in a} & {d.id for d in b}) / max(len(a), 1))
            filtered[f"{share:.0%}"] = {"admitted_chunks": admitted, "sources": len(filters["source"]), "top_k": 10, "questions": len(got["local"]),
                                        **{f"returned_{name}": statistics.mean(v) for name, v in got.items()},
                                        **{f"overlap_{name}": round(statistics.mean(v), 4) for name, v in same.items()}}
    mrr = {key: round(statistics.mean(v), 4) for key, v in rr.items()}
    entry = {
        "chunks": len(local), "questions": len(asked), "migrate": migrations,
        "dense_overlap@10": {name: round(statistics.mean(v), 4) for name, v in overlap.items()}, "mrr@10": mrr,
        "hybrid_mrr_difference": {name: round(mrr[f"hybrid/{name}"] - mrr["hybrid/local"], 4) for name in stores},
        "fulltext_empty": round(empty / len(asked), 4), "filtered": filtered,
        "p50_ms": {key: round(statistics.median(v), 2) for key, v in ms.items()},
        "settings": {"pgvector": "BM25 postings (ragkit, bm25s's lucene formula); HNSW (m 16, ef_construction 64: the integration's defaults), hnsw.ef_search 200, hnsw.iterative_scan strict_order",
                     "milvus": "milvus-lite 3.2.2 server (gRPC); HNSW cosine (M 16, efConstruction 200), ef 200; server-side BM25 (k1 1.5, b 0.75) over ragkit's tokens",
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
