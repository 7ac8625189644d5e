"""Pick the hybrid retriever's RRF weights on a held-out set: SQuAD-Shifts new_wiki.

The retrieval benchmark reports on SQuAD v1.1 dev; tuning the fusion weight there would tune on the
test set. new_wiki is the same task on different Wikipedia articles (Miller et al. 2020, CC BY 4.0),
so the weight is chosen here and only then evaluated on dev. The data is not copied into the repo;
this script reads it from ``../shared/data/squad/`` (or ``--data``).

    .venv/bin/python bench/tune_hybrid.py
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
from haystack import Document

from ragkit.config import ModelConfig
from ragkit.index.store import RagIndex
from ragkit.llm.generators import build_document_embedder, build_text_embedder
from ragkit.index.retrieval import HybridRetriever

ROOT = Path(__file__).resolve().parent.parent


def ndcg_mrr(ranked: list[list[str]], relevant: list[str]) -> tuple[float, float, float]:
    ndcg = mrr = r10 = 0.0
    for ids, rel in zip(ranked, relevant):
        if rel in ids[:10]:
            rank = ids.index(rel) + 1
            ndcg += 1 / np.log2(rank + 1)
            mrr += 1 / rank
            r10 += 1
    n = len(relevant)
    return ndcg / n, mrr / n, r10 / n


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "squad" / "new_wiki_v1.0.json.gz"))
    parser.add_argument("--max-queries", type=int, default=3000)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "hybrid_weights_new_wiki.json"))
    args = parser.parse_args()
    if not Path(args.data).is_file():
        sys.exit(f"{args.data} not found: this tuning run needs SQuAD-Shifts new_wiki (see ../shared/data/squad)")
    with gzip.open(args.data, "rt", encoding="utf-8") as fh:
        data = json.load(fh)["data"]
    docs, queries, relevant = [], [], []
    for a, article in enumerate(data):
        for p, para in enumerate(article["paragraphs"]):
            doc_id = f"{a}-{p}"
            docs.append(Document(id=doc_id, content=para["context"], meta={"source": article.get("title", str(a))}))
            for qa in para["qas"]:
                queries.append(qa["question"])
                relevant.append(doc_id)
    rng = np.random.default_rng(0)
    pick = sorted(rng.choice(len(queries), size=min(args.max_queries, len(queries)), replace=False).tolist())
    queries = [queries[i] for i in pick]
    relevant = [relevant[i] for i in pick]

    models = ModelConfig()
    t0 = time.perf_counter()
    embedded = build_document_embedder(models, progress_bar=True, batch_size=64)
    embedded.warm_up()
    docs = embedded.run(documents=docs)["documents"]
    text = build_text_embedder(models)
    text.warm_up()
    qvecs = text.embedding_backend.embed(queries, normalize_embeddings=True, show_progress_bar=True, batch_size=64)
    embed_s = time.perf_counter() - t0
    index = RagIndex(embedder=models.embedder, dim=len(docs[0].embedding))
    index.add(docs)

    results = {}
    for weight in (0.3, 0.4, 0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.9):
        retriever = HybridRetriever(index, models, embedder=text, sparse_weight=weight)
        ranked = [[d.id for d in retriever.retrieve(q, top_k=10, query_embedding=v).documents] for q, v in zip(queries, qvecs)]
        ndcg, mrr, r10 = ndcg_mrr(ranked, relevant)
        results[str(weight)] = {"ndcg@10": round(ndcg, 4), "mrr@10": round(mrr, 4), "recall@10": round(r10, 4)}
        print(f"sparse_weight={weight}: nDCG@10 {ndcg:.4f}  MRR@10 {mrr:.4f}  R@10 {r10:.4f}", flush=True)
    for name, fn in (("sparse-only", lambda q, v: index.sparse_search(q, 10)), ("dense-only", lambda q, v: index.dense_search(v, 10))):
        ranked = [[d.id for d in fn(q, v)] for q, v in zip(queries, qvecs)]
        ndcg, mrr, r10 = ndcg_mrr(ranked, relevant)
        results[name] = {"ndcg@10": round(ndcg, 4), "mrr@10": round(mrr, 4), "recall@10": round(r10, 4)}
        print(f"{name}: nDCG@10 {ndcg:.4f}", flush=True)
    best = max((k for k in results if k[0].isdigit()), key=lambda k: results[k]["ndcg@10"])
    out = {
        "dataset": "SQuAD-Shifts new_wiki (held out from the SQuAD v1.1 dev benchmark)",
        "corpus_docs": len(docs), "queries": len(queries), "embed_s": round(embed_s, 1),
        "by_sparse_weight": results, "best_sparse_weight": float(best),
        "command": "python bench/tune_hybrid.py",
    }
    Path(args.out).write_text(json.dumps(out, indent=1))
    print("best sparse_weight:", best)
    return 0


if __name__ == "__main__":
    sys.exit(main())
