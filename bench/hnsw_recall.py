"""How much does the HNSW index that ragkit switches to past 50k chunks lose against exact search?

Builds the same ≥100k-chunk index as the retrieval benchmark's scale run (real SQuAD MiniLM
vectors replicated with Gaussian noise, σ = 0.01, re-normalised) twice — exact ``IndexFlatIP`` and
``IndexHNSWFlat`` — and reports, over 300 SQuAD questions, the overlap of their top-10 lists (recall@10 of HNSW
against exact, per chunk and per underlying paragraph) at several efSearch values, and the
latencies, in one process.

    .venv/bin/python bench/hnsw_recall.py
"""

from __future__ import annotations

import gzip
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from haystack import Document

import ragkit.index.store as index_module
from ragkit.config import ModelConfig
from ragkit.index.store import RagIndex
from ragkit.llm.generators import build_text_embedder

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_EF = index_module.HNSW_EF_SEARCH


def main(n_chunks: int = 100_000, n_queries: int = 300, noise: float = 0.01, seed: int = 0) -> int:
    with gzip.open(ROOT / "data" / "squad" / "squaddev_v1.1.json.gz", "rt", encoding="utf-8") as fh:
        data = json.load(fh)["data"]
    paragraphs = [p["context"] for a in data for p in a["paragraphs"]]
    questions = [qa["question"] for a in data for p in a["paragraphs"] for qa in p["qas"]]
    embedder = build_text_embedder(ModelConfig())
    embedder.warm_up()
    model = embedder.embedding_backend
    t0 = time.perf_counter()
    vectors = np.asarray(model.embed(paragraphs, normalize_embeddings=True, show_progress_bar=True, batch_size=64), dtype="float32")
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(questions), n_queries, replace=False)
    qvecs = np.asarray(model.embed([questions[i] for i in picks], normalize_embeddings=True, show_progress_bar=False), dtype="float32")
    embed_s = time.perf_counter() - t0

    replicas = math.ceil(n_chunks / len(paragraphs))
    blocks = [vectors] + [vectors + rng.normal(0, noise, vectors.shape).astype("float32") for _ in range(replicas - 1)]
    results = {}
    for kind in ("flat", "hnsw"):
        index = RagIndex(embedder="all-MiniLM-L6-v2", dim=vectors.shape[1], dense_index=kind)
        t0 = time.perf_counter()
        for r, block in enumerate(blocks):
            block = block / np.linalg.norm(block, axis=1, keepdims=True)
            index.add([Document(id=f"{i}#{r}", content=paragraphs[i], meta={"source": str(r)}, embedding=v) for i, v in enumerate(block.tolist())])
        build_s = time.perf_counter() - t0
        for ef in ((None,) if kind == "flat" else (96, 256, 512)):
            if ef is not None:
                index_module.HNSW_EF_SEARCH = ef
            lists, times = [], []
            for q in qvecs:
                t0 = time.perf_counter()
                lists.append([d.id for d in index.dense_search(q, 10)])
                times.append((time.perf_counter() - t0) * 1000)
            name = kind if ef is None else f"hnsw_ef{ef}"
            results[name] = {"lists": lists, "build_s": round(build_s, 1), "ms_p50": round(float(np.median(times)), 3), "ms_p95": round(float(np.percentile(times, 95)), 3), "chunks": len(index)}
        del index
    exact = results["flat"]["lists"]
    for name in [k for k in results if k.startswith("hnsw")]:
        got = results[name]["lists"]
        results[name]["recall@10_vs_exact"] = round(float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact, got)])), 4)
        # the replicas of one paragraph are near-duplicates: also compare which paragraphs come back
        results[name]["paragraph_recall@10_vs_exact"] = round(float(np.mean([
            len({i.split("#")[0] for i in a} & {i.split("#")[0] for i in b}) / len({i.split("#")[0] for i in a}) for a, b in zip(exact, got)
        ])), 4)
    out = {
        "chunks": results["flat"]["chunks"], "queries": n_queries,
        "vectors": f"real MiniLM vectors of the {len(paragraphs)} SQuAD dev paragraphs, {replicas}x, replicas 1.. with N(0, {noise}) noise, re-normalised",
        "exact": {k: v for k, v in results["flat"].items() if k != "lists"},
        **{name: {k: v for k, v in r.items() if k != "lists"} for name, r in results.items() if name.startswith("hnsw")},
        "ragkit_default_ef_search": DEFAULT_EF,
        "embed_s": round(embed_s, 1),
        "command": "python bench/hnsw_recall.py",
    }
    (ROOT / "bench" / "results" / "hnsw_recall.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
