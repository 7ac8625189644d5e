"""Which offline reranker helps on SQuAD? Gold-paragraph rank among hybrid candidates.

No cross-encoder weights can be installed here, so the candidates are what ragkit has offline:
the embedded all-MiniLM-L6-v2 as a bi-encoder (whole chunk, or best sentence), and the local LLM's
P(yes) per chunk — each on its own and fused with the retrieval order by reciprocal rank fusion.
Hybrid retrieval (BM25 weight 0.8) gives 15 candidates per question; every reranker reorders the
same candidates. The LLM rows run on the first ``--llm-questions`` questions (each costs ~15 chunk
evaluations); the other rows are also reported on that subset for a like-for-like comparison.

    .venv/bin/python bench/rerank_squad.py                       # 400 questions, LLM on 20
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
from squad_common import ROOT, load_squad, run_facts, squad_index
from tqdm import tqdm

from ragkit.components.reranker import RRF_K, Reranker, fused_order
from ragkit.config import ModelConfig
from ragkit.llm.generators import build_chat_generator, shared_text_embedder
from ragkit.index.retrieval import HybridRetriever


def metrics(ranks: list[int], ms: list[float]) -> dict:
    r = np.asarray(ranks)
    return {
        "questions": len(ranks),
        "recall@1": round(float((r <= 1).mean()), 4),
        "recall@3": round(float((r <= 3).mean()), 4),
        "recall@5": round(float((r <= 5).mean()), 4),
        "mrr": round(float(np.where(r < 99, 1 / r, 0).mean()), 4),
        "ms_per_q_p50": round(float(np.median(ms)), 1) if ms else 0.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=400)
    parser.add_argument("--candidates", type=int, default=15)
    parser.add_argument("--llm", default="qwen2.5-coder-0.5b")
    parser.add_argument("--llm-questions", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "rerank_squad.json"))
    args = parser.parse_args()

    docs, questions = load_squad()
    index = squad_index(docs)
    retriever = HybridRetriever(index, ModelConfig())
    sample = random.Random(args.seed).sample(questions, args.questions)
    embedder = shared_text_embedder().embedding_backend
    sentence = Reranker(backend="bi-encoder", fuse_with_retrieval=False)
    sentence.warm_up()
    llm = Reranker(backend="llm", chat_generator=build_chat_generator(ModelConfig(llm=args.llm)), fuse_with_retrieval=False) if args.llm_questions else None
    if llm:
        llm.warm_up()

    ranks: dict[str, list[int]] = {k: [] for k in ("hybrid", "bi-encoder-chunk", "bi-encoder-chunk+fused", "bi-encoder-sentence", "bi-encoder-sentence+fused", "llm", "llm+fused")}
    times: dict[str, list[float]] = {k: [] for k in ranks}
    for n, q in enumerate(tqdm(sample, file=sys.stderr, mininterval=5)):
        cands = retriever.retrieve(q["question"], top_k=args.candidates, mode="hybrid").documents
        ids = [d.id for d in cands]

        def rank(order: list[int]) -> int:
            ordered = [ids[i] for i in order]
            return ordered.index(q["doc_id"]) + 1 if q["doc_id"] in ordered else 99

        ranks["hybrid"].append(rank(list(range(len(cands)))))
        t0 = time.perf_counter()
        vectors = np.asarray(embedder.embed([q["question"]] + [d.content for d in cands], normalize_embeddings=True, show_progress_bar=False))
        chunk_scores = (vectors[1:] @ vectors[0]).tolist()
        times["bi-encoder-chunk"].append((time.perf_counter() - t0) * 1000)
        ranks["bi-encoder-chunk"].append(rank(sorted(range(len(cands)), key=lambda i: -chunk_scores[i])))
        ranks["bi-encoder-chunk+fused"].append(rank(fused_order(chunk_scores)))
        t0 = time.perf_counter()
        out = sentence.run(query=q["question"], documents=cands)
        times["bi-encoder-sentence"].append((time.perf_counter() - t0) * 1000)
        by_id = {d.id: d.score for d in out["documents"]}
        sent_scores = [by_id[i] for i in ids]
        ranks["bi-encoder-sentence"].append(rank(sorted(range(len(cands)), key=lambda i: -sent_scores[i])))
        ranks["bi-encoder-sentence+fused"].append(rank(fused_order(sent_scores)))
        if llm and n < args.llm_questions:
            t0 = time.perf_counter()
            out = llm.run(query=q["question"], documents=cands)
            times["llm"].append((time.perf_counter() - t0) * 1000)
            by_id = {d.id: d.score for d in out["documents"]}
            llm_scores = [by_id[i] for i in ids]
            ranks["llm"].append(rank(sorted(range(len(cands)), key=lambda i: -llm_scores[i])))
            ranks["llm+fused"].append(rank(fused_order(llm_scores)))
    for k in ("bi-encoder-chunk+fused", "bi-encoder-sentence+fused", "llm+fused"):
        times[k] = times[k.split("+")[0]]
    subset = args.llm_questions
    report = {
        "benchmark": "reranking hybrid candidates, SQuAD v1.1 dev (gold paragraph rank)",
        "command": "python bench/rerank_squad.py " + " ".join(sys.argv[1:]),
        "candidates": args.candidates,
        "rrf_k": RRF_K,
        "llm": args.llm,
        "all_questions": {k: metrics(v, times[k]) for k, v in ranks.items() if v and not k.startswith("llm")},
        f"first_{subset}_questions": {k: metrics(v[:subset], times[k][:subset]) for k, v in ranks.items() if v},
        "run": run_facts(),
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k.endswith("questions")}, indent=1), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
