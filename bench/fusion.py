"""How the hybrid retriever fuses dense and sparse lists, over every question of SQuAD v1.1 dev and
SQuAD-Shifts new_wiki: sparse, dense, the shipped fusion (``HybridScoreJoiner``: each list's
scores divided by its best, equal weights) and the reciprocal rank fusion it replaced (BM25
weight 0.8), plus checks that the fusion holds when the dense retriever is much weaker.

Run from the repository root (10-20 min on 2 cores once the indexes are cached under bench/.cache)::

    .venv/bin/python bench/fusion.py
    .venv/bin/python bench/fusion.py --max-queries 500 --out /tmp/fusion.json --no-answer-quality   # quick check

Writes ``bench/results/fusion.json`` and the ``"retrieval"`` section of
``bench/results/answer_quality.json`` (read, modified, written back: other keys are kept).

Every figure is from the realistic call, ``top_k=10`` (candidate lists ``candidate_depth(10)`` = 30
deep each), one relevant paragraph per question: MRR@10 and Recall@10.

* ``sets``: sparse (bm25s), dense (MiniLM + FAISS), ``hybrid`` = ``HybridRetriever.retrieve(mode="hybrid")``
  as shipped, and for reference ``rrf_0.8`` (the old default), ``rrf_0.5`` (plain RRF) and Haystack's
  ``distribution_based_rank_fusion``, all on the same candidate lists.
* ``weight_sweep``: the fusion's BM25 weight from 0.3 to 0.7. The default (0.5) was set a priori;
  the sweep on new_wiki is where it would have been chosen, dev only shows it.
* ``robustness``: the same fusion with a deliberately weaker dense retriever — Gaussian noise on the
  query vectors, MiniLM cut to its first 48/24/12 dimensions, or the dense list of a random other
  question for 20% / 30% of the questions (confidently wrong) — and with a weaker BM25 (it sees a
  random half of each question's words). The fusion should stay at or above the better single list.
* ``latency_ms``: hybrid retrieval with a precomputed embedding, new fusion vs the old RRF joiner, and
  the joiners alone, on 1,000 seeded dev questions.
* ``other_embedder`` (with ``--embedder-dir``): dense and hybrid with a second sentence-transformers
  model (e.g. all-mpnet-base-v2), its corpus embedding time on this machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
import time
from pathlib import Path

import faiss
import numpy as np
from haystack import Document
from haystack.components.joiners import DocumentJoiner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.squad_common import CACHE, load_squad, run_facts  # noqa: E402
from ragkit.components.score_fusion import HybridScoreJoiner  # noqa: E402
from ragkit.config import ModelConfig  # noqa: E402
from ragkit.eval.experiments import index_documents  # noqa: E402
from ragkit.index.retrieval import DEFAULT_SPARSE_WEIGHT, HybridRetriever, candidate_depth  # noqa: E402
from ragkit.llm.generators import build_text_embedder  # noqa: E402

SETS = {
    "squad_dev": ROOT / "data" / "squad" / "squaddev_v1.1.json.gz",
    "new_wiki": ROOT / "data" / "squad" / "new_wiki_v1.0.json.gz",
}
TOP_K = 10
OLD_WEIGHT = 0.8
SWEEP = (0.3, 0.4, 0.5, 0.6, 0.7)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def score(ranked: list[list[str]], gold: list[str]) -> dict[str, float]:
    mrr = r10 = 0.0
    for ids, g in zip(ranked, gold):
        if g in ids[:TOP_K]:
            mrr += 1.0 / (ids.index(g) + 1)
            r10 += 1
    n = max(len(gold), 1)
    return {"mrr@10": round(mrr / n, 4), "recall@10": round(r10 / n, 4)}


def ids_of(docs: list[Document]) -> list[str]:
    return [d.id for d in docs]


def embed_questions(name: str, questions: list[str], encode, tag: str) -> np.ndarray:
    """All question vectors (``encode(texts) -> vectors``), kept under bench/.cache, keyed by the
    questions and the model's ``tag``."""
    key = hashlib.sha256(("\n".join(questions) + tag).encode()).hexdigest()[:12]
    path = CACHE / f"fusion_questions_{name}_{key}.npy"
    if path.is_file():
        return np.load(path)
    t0 = time.perf_counter()
    vecs = np.asarray(encode(questions), dtype="float32")
    log(f"{name}: embedded {len(questions)} questions with {tag} in {time.perf_counter() - t0:.0f} s")
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vecs)
    return vecs


class Lists:
    """The candidate lists of every question, as Documents with their retriever's score."""

    def __init__(self, index, questions: list[str], qvecs: np.ndarray, depth: int):
        self.index, self.questions, self.qvecs, self.depth = index, questions, qvecs, depth
        fids = faiss.vector_to_array(index._dense.id_map).astype("int64")
        self.doc_vectors = index._dense.index.reconstruct_n(0, index._dense.ntotal)
        self.doc_ids = [index._chunk_at[int(f)] for f in fids]
        self.sparse = [index.sparse_search(q, depth) for q in questions]

    def docs_from_scores(self, sims: np.ndarray) -> list[list[Document]]:
        """Exact top-``depth`` dense lists from a (questions x corpus) similarity matrix."""
        top = np.argsort(-sims, axis=1, kind="stable")[:, : self.depth]
        chunks = self.index.chunks
        return [
            [Document(id=self.doc_ids[j], content=chunks[self.doc_ids[j]].content, meta=chunks[self.doc_ids[j]].meta, score=float(sims[i, j])) for j in row]
            for i, row in enumerate(top)
        ]

    def dense(self, qvecs: np.ndarray | None = None, doc_vectors: np.ndarray | None = None) -> list[list[Document]]:
        q = self.qvecs if qvecs is None else qvecs
        d = self.doc_vectors if doc_vectors is None else doc_vectors
        return self.docs_from_scores(q @ d.T)


def fuse_all(dense: list[list[Document]], sparse: list[list[Document]]) -> dict[str, list[list[str]]]:
    """Every fusion on the same lists, top 10 each."""
    new = HybridScoreJoiner(sparse_weight=DEFAULT_SPARSE_WEIGHT, top_k=TOP_K)
    rrf8 = DocumentJoiner(join_mode="reciprocal_rank_fusion", weights=[1 - OLD_WEIGHT, OLD_WEIGHT], top_k=TOP_K)
    rrf5 = DocumentJoiner(join_mode="reciprocal_rank_fusion", top_k=TOP_K)
    dbsf = DocumentJoiner(join_mode="distribution_based_rank_fusion", top_k=TOP_K)
    out = {"sparse": [], "dense": [], "hybrid": [], "rrf_0.8": [], "rrf_0.5": [], "haystack_dbsf": []}
    for d, s in zip(dense, sparse):
        out["sparse"].append(ids_of(s[:TOP_K]))
        out["dense"].append(ids_of(d[:TOP_K]))
        out["hybrid"].append(ids_of(new.run(dense_documents=d, sparse_documents=s)["documents"]))
        out["rrf_0.8"].append(ids_of(rrf8.run(documents=[d, s])["documents"]))
        out["rrf_0.5"].append(ids_of(rrf5.run(documents=[d, s])["documents"]))
        out["haystack_dbsf"].append(ids_of(dbsf.run(documents=[d, s])["documents"]))
    return out


def degraded_scenarios(lists: Lists, rng_seed: int):
    """(label, description, dense lists, sparse lists) for each weakened retriever."""
    q, d = lists.qvecs, lists.doc_vectors
    for sigma in (1.0, 2.0, 3.0):
        rng = np.random.default_rng(rng_seed)
        noisy = q + sigma * rng.standard_normal(q.shape).astype("float32") / np.sqrt(q.shape[1])
        noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
        yield f"dense_noise_{sigma:g}", f"query vectors + Gaussian noise of norm ~{sigma:g}, re-normalised", lists.dense(qvecs=noisy), lists.sparse
    for dims in (48, 24, 12):
        qd = q[:, :dims] / np.linalg.norm(q[:, :dims], axis=1, keepdims=True)
        dd = d[:, :dims] / np.linalg.norm(d[:, :dims], axis=1, keepdims=True)
        yield f"dense_dims_{dims}", f"MiniLM cut to its first {dims} of 384 dimensions (query and corpus), re-normalised", lists.dense(qvecs=qd, doc_vectors=dd), lists.sparse
    base = lists.dense()
    for share in (0.2, 0.3):
        rng = np.random.default_rng(rng_seed)
        swap = rng.random(len(base)) < share
        other = rng.integers(0, len(base), len(base))
        dense = [base[o] if s else b for b, s, o in zip(base, swap, other)]
        yield f"dense_wrong_{share:g}", f"for {share:.0%} of questions the dense list of a random other question (confidently wrong)", dense, lists.sparse
    rng = np.random.default_rng(rng_seed)
    halves = []
    for text in lists.questions:
        words = text.split()
        keep = rng.random(len(words)) < 0.5
        if not keep.any():
            keep[rng.integers(len(words))] = True
        halves.append(" ".join(w for w, k in zip(words, keep) if k))
    sparse = [lists.index.sparse_search(h, lists.depth) for h in halves]
    yield "sparse_half_words", "BM25 sees a random half of each question's words (dense sees all)", base, sparse


def latency(lists: Lists, n: int, seed: int) -> dict:
    """ms per question, one at a time: dense + sparse search + joiner, and the joiners alone."""
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(lists.questions), size=min(n, len(lists.questions)), replace=False)
    index, depth = lists.index, lists.depth
    new = HybridScoreJoiner(sparse_weight=DEFAULT_SPARSE_WEIGHT)
    old = DocumentJoiner(join_mode="reciprocal_rank_fusion", weights=[1 - OLD_WEIGHT, OLD_WEIGHT])
    retriever = HybridRetriever(index, embedder=object())  # the embedding is passed in; it never embeds
    q, v = lists.questions, lists.qvecs
    pre = {int(i): (index.dense_search(v[i], depth), lists.sparse[i]) for i in pick}
    runs = {
        # both searches + the joiner, the same code around either joiner
        "search_and_fuse_new": lambda i: new.run(dense_documents=index.dense_search(v[i], depth), sparse_documents=index.sparse_search(q[i], depth), top_k=TOP_K),
        "search_and_fuse_old_rrf": lambda i: old.run(documents=[index.dense_search(v[i], depth), index.sparse_search(q[i], depth)], top_k=TOP_K),
        "joiner_new": lambda i: new.run(dense_documents=pre[i][0], sparse_documents=pre[i][1], top_k=TOP_K),
        "joiner_old_rrf": lambda i: old.run(documents=[pre[i][0], pre[i][1]], top_k=TOP_K),
        # what a caller pays: HybridRetriever.retrieve(mode="hybrid") with the embedding precomputed
        "hybrid_retrieve": lambda i: retriever.retrieve(q[i], top_k=TOP_K, query_embedding=v[i]),
    }
    out = {}
    for name, fn in runs.items():
        for i in pick[:20]:
            fn(int(i))
        ms = []
        for i in pick:
            t0 = time.perf_counter()
            fn(int(i))
            ms.append((time.perf_counter() - t0) * 1000)
        out[name] = {"p50": round(float(np.percentile(ms, 50)), 3), "p95": round(float(np.percentile(ms, 95)), 3)}
        log(f"latency {name}: p50 {out[name]['p50']} ms")
    out["questions"] = len(pick)
    return out


def other_embedder(path: Path, name: str, docs: list[Document], lists: Lists, gold: list[str], n_questions: int, seed: int) -> dict:
    """Dense and hybrid with a second sentence-transformers model on a seeded sample of questions.
    Its vectors are kept under bench/.cache with the seconds the corpus took when first embedded."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu")
    key = hashlib.sha256(("\n".join(lists.doc_ids) + path.name).encode()).hexdigest()[:12]
    cache = CACHE / f"fusion_corpus_{name}_{path.name}_{key}.npz"
    if cache.is_file():
        saved = np.load(cache)
        dv, corpus_s, load = saved["vectors"], float(saved["seconds"]), float(saved["load_average"])
    else:
        by_id = {d.id: d.content for d in docs}
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        dv = model.encode([by_id[i] for i in lists.doc_ids], batch_size=64, normalize_embeddings=True, convert_to_numpy=True).astype("float32")
        corpus_s = time.perf_counter() - t0
        np.savez(cache, vectors=dv, seconds=corpus_s, load_average=load)
    rng = np.random.default_rng(seed)
    pick = sorted(rng.choice(len(gold), size=min(n_questions, len(gold)), replace=False).tolist())
    questions = [lists.questions[i] for i in pick]
    qv = embed_questions(name, questions, lambda texts: model.encode(texts, batch_size=64, normalize_embeddings=True), path.name)
    one = []
    for q in questions[:70]:
        t0 = time.perf_counter()
        model.encode([q], normalize_embeddings=True)
        one.append((time.perf_counter() - t0) * 1000)
    sims = qv @ dv.T
    fused = fuse_all(lists.docs_from_scores(sims), [lists.sparse[i] for i in pick])
    base = fuse_all([lists.index.dense_search(lists.qvecs[i], lists.depth) for i in pick], [lists.sparse[i] for i in pick])
    sub_gold = [gold[i] for i in pick]
    return {
        "model": path.name, "dim": int(dv.shape[1]), "max_seq_length": model.max_seq_length, "questions": len(pick),
        "corpus_embed_s": round(corpus_s, 1), "load_average_when_embedding_corpus": round(load, 2),
        "query_embed_ms_p50": round(float(np.median(one[10:])), 1), "load_average_now": round(os.getloadavg()[0], 2),
        "with_it": {k: score(fused[k], sub_gold) for k in ("sparse", "dense", "hybrid", "rrf_0.8")},
        "with_minilm_same_questions": {k: score(base[k], sub_gold) for k in ("sparse", "dense", "hybrid", "rrf_0.8")},
    }


def write_answer_quality(path: Path, retrieval: dict) -> None:
    data = json.loads(path.read_text()) if path.is_file() else {}
    data["retrieval"] = retrieval
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated: squad_dev,new_wiki")
    ap.add_argument("--max-queries", type=int, default=0, help="seeded sample per set (default: every question)")
    ap.add_argument("--latency-queries", type=int, default=1000)
    ap.add_argument("--embedder-dir", type=Path, default=None, help="a second sentence-transformers model folder to compare (e.g. all-mpnet-base-v2)")
    ap.add_argument("--embedder-sets", default="squad_dev", help="sets the second model is tried on")
    ap.add_argument("--embedder-questions", type=int, default=2000, help="seeded sample of questions for the second model")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fusion.json")
    ap.add_argument("--answer-quality", type=Path, default=ROOT / "bench" / "results" / "answer_quality.json")
    ap.add_argument("--no-answer-quality", action="store_true", help="do not touch answer_quality.json")
    args = ap.parse_args()
    command = " ".join(shlex.quote(a) for a in ["python", os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])
    facts = run_facts()
    depth = candidate_depth(TOP_K)
    text_embedder = build_text_embedder(ModelConfig())
    text_embedder.warm_up()
    result: dict = {
        "command": command, "top_k": TOP_K, "candidate_depth": depth, "sparse_weight": DEFAULT_SPARSE_WEIGHT,
        "old_fusion": f"DocumentJoiner reciprocal_rank_fusion, weights [dense {1 - OLD_WEIGHT:.1f}, sparse {OLD_WEIGHT}]",
        "weight_choice": "0.5 (equal) set a priori; weight_sweep shows new_wiki (where a choice would be made) and squad_dev",
        "sets": {}, "weight_sweep": {}, "robustness": {}, "facts": facts,
    }
    t_start = time.perf_counter()
    for name in args.sets.split(","):
        docs, qs = load_squad(SETS[name])
        if args.max_queries and args.max_queries < len(qs):
            rng = np.random.default_rng(args.seed)
            qs = [qs[i] for i in sorted(rng.choice(len(qs), args.max_queries, replace=False).tolist())]
        index = index_documents(docs, CACHE / f"{name}_index_all-MiniLM-L6-v2", progress=True)
        questions, gold = [q["question"] for q in qs], [q["doc_id"] for q in qs]
        qvecs = embed_questions(
            name, questions, lambda texts: text_embedder.embedding_backend.embed(texts, normalize_embeddings=True, show_progress_bar=False, batch_size=64), "all-MiniLM-L6-v2"
        )
        lists = Lists(index, questions, qvecs, depth)
        dense = [index.dense_search(v, depth) for v in qvecs]
        fused = fuse_all(dense, lists.sparse)
        # the shipped path, end to end, must rank as the joiner above does
        retriever = HybridRetriever(index, embedder=object())
        shipped = [ids_of(retriever.retrieve(q, top_k=TOP_K, mode="hybrid", query_embedding=v).documents) for q, v in zip(questions, qvecs)]
        assert shipped == fused["hybrid"], "HybridRetriever.retrieve differs from HybridScoreJoiner on the same lists"
        row = {"questions": len(qs), "paragraphs": len(docs), **{k: score(v, gold) for k, v in fused.items()}}
        result["sets"][name] = row
        log(f"{name}: " + "  ".join(f"{k} {v['mrr@10']:.4f}/{v['recall@10']:.4f}" for k, v in row.items() if isinstance(v, dict)))
        sweep = {}
        for w in SWEEP:
            joiner = HybridScoreJoiner(sparse_weight=w, top_k=TOP_K)
            sweep[f"{w:g}"] = score([ids_of(joiner.run(dense_documents=d, sparse_documents=s)["documents"]) for d, s in zip(dense, lists.sparse)], gold)
        result["weight_sweep"][name] = sweep
        log(f"{name} sweep: " + "  ".join(f"{w} {v['mrr@10']:.4f}/{v['recall@10']:.4f}" for w, v in sweep.items()))
        rob = {}
        for label, what, d_lists, s_lists in degraded_scenarios(lists, args.seed):
            f = fuse_all(d_lists, s_lists)
            rob[label] = {"what": what, **{k: score(f[k], gold) for k in ("sparse", "dense", "hybrid", "rrf_0.8")}}
            log(f"{name} {label}: " + "  ".join(f"{k} {rob[label][k]['mrr@10']:.4f}/{rob[label][k]['recall@10']:.4f}" for k in ("sparse", "dense", "hybrid", "rrf_0.8")))
        result["robustness"][name] = rob
        if name == "squad_dev" and args.latency_queries:
            result["latency_ms"] = latency(lists, args.latency_queries, args.seed)
        if args.embedder_dir and name in args.embedder_sets.split(","):
            result.setdefault("other_embedder", {})[name] = other_embedder(args.embedder_dir, name, docs, lists, gold, args.embedder_questions, args.seed)
            log(f"{name} other embedder: {result['other_embedder'][name]}")
    result["seconds"] = round(time.perf_counter() - t_start, 1)
    result["load_average_end"] = round(os.getloadavg()[0], 2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {args.out}")
    if not args.no_answer_quality:
        retrieval = {
            name: {k: row[k] for k in ("sparse", "dense", "hybrid")} for name, row in result["sets"].items()
        }
        write_answer_quality(args.answer_quality, retrieval)
        log(f"wrote the retrieval section of {args.answer_quality}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
