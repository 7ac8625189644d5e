"""Retrieval quality and latency on SQuAD v1.1 dev: ragkit (sparse / dense / hybrid) against
Haystack's in-memory BM25 and embedding retrievers and rank_bm25, all in one process.

Corpus: every SQuAD paragraph is one document; a question's only relevant document is the paragraph
it was asked on (binary relevance; other paragraphs may also answer it, so absolute numbers are a
lower bound, the same for every system).

Run from the repository root::

    .venv/bin/python bench/retrieval_squad.py                      # full run (~15-25 min on 2 cores)
    .venv/bin/python bench/retrieval_squad.py --max-queries 500 --scale-chunks 0   # quick check

Writes ``bench/results/retrieval_squad.json`` and ``bench/results/retrieval_squad.md`` and prints
the markdown table to stdout; progress goes to stderr. See bench/README.md for what every number means.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import math
import os
import platform
import random
import re
import resource
import shlex
import subprocess
import sys
import threading
import time
from importlib import metadata
from pathlib import Path

try:
    from rank_bm25 import BM25Okapi
except ImportError:  # fail fast, before the slow imports
    sys.exit("bench/retrieval_squad.py needs rank_bm25 for the rank-bm25 baseline: .venv/bin/pip install rank-bm25")

import faiss
import numpy as np
import psutil
from tqdm import tqdm

from haystack import Document
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

import ragkit.index.retrieval as ragkit_retrieval
from ragkit.config import ModelConfig
from ragkit.index.store import RagIndex
from ragkit.llm.generators import build_document_embedder, build_text_embedder
from ragkit.index.retrieval import HybridRetriever

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT / "data" / "squad" / "squaddev_v1.1.json.gz"
DEFAULT_OUT = ROOT / "bench" / "results" / "retrieval_squad.json"
SYSTEMS = ["ragkit-sparse", "ragkit-dense", "ragkit-hybrid", "haystack-bm25", "haystack-embedding", "rank-bm25"]
DENSE_SYSTEMS = {"ragkit-dense", "ragkit-hybrid", "haystack-embedding"}
METRIC_K = 100  # every system returns its top 100 for the quality metrics
LATENCY_K = 10  # the realistic call, timed
WARMUP = 20
_TOKEN_RE = re.compile(r"\w+")


def log(msg: str) -> None:
    tqdm.write(msg, file=sys.stderr)


def progress(iterable, desc: str, total: int | None = None):
    return tqdm(iterable, desc=desc, total=total, file=sys.stderr, mininterval=2.0, leave=False)


# -- data ------------------------------------------------------------------------------------
def load_squad(path: Path):
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    docs, queries = [], []
    for a, article in enumerate(data["data"]):
        for p, para in enumerate(article["paragraphs"]):
            doc_id = f"{a}-{p}"
            docs.append(Document(id=doc_id, content=para["context"], meta={"title": article["title"], "source": article["title"]}))
            for qa in para["qas"]:
                queries.append({"id": qa["id"], "question": qa["question"], "relevant": doc_id})
    return docs, queries, data.get("version", "?")


# -- metrics ---------------------------------------------------------------------------------
def quality(ranked: list[list[str]], relevant: list[str]) -> dict[str, float]:
    """nDCG@10, Recall@1/10/100, MRR@10 with one relevant document per query (binary relevance)."""
    ndcg = r1 = r10 = r100 = mrr = 0.0
    for ids, rel in zip(ranked, relevant):
        try:
            rank = ids.index(rel) + 1  # 1-based
        except ValueError:
            continue
        if rank <= 10:
            ndcg += 1.0 / math.log2(rank + 1)  # ideal DCG is 1 (one relevant doc at rank 1)
            mrr += 1.0 / rank
            r10 += 1
        r1 += rank == 1
        r100 += rank <= 100
    n = max(len(ranked), 1)
    return {k: round(v / n, 4) for k, v in (("ndcg@10", ndcg), ("recall@1", r1), ("recall@10", r10), ("recall@100", r100), ("mrr@10", mrr))}


def pct(ms: list[float], q: float) -> float | None:
    return round(float(np.percentile(np.asarray(ms), q)), 3) if ms else None


def time_calls(fn, items, desc: str) -> list[float]:
    """Milliseconds for each call ``fn(item)``, one at a time, after a few untimed warm-up calls."""
    for item in items[:WARMUP]:
        fn(item)
    out = []
    for item in progress(items, desc):
        t0 = time.perf_counter()
        fn(item)
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


PROBES: dict[str, float] = {}


def probe(text_embedder, label: str, questions: list[str]) -> None:
    """p50 of embedding 10 questions one at a time: a check that the machine is not being slowed down meanwhile."""
    ms = []
    for q in questions[:10]:
        t0 = time.perf_counter()
        text_embedder.run(text=q)
        ms.append((time.perf_counter() - t0) * 1000.0)
    PROBES[label] = round(float(np.median(ms)), 2)
    log(f"probe [{label}]: one-query embedding p50 {PROBES[label]:.1f} ms, load average {os.getloadavg()[0]:.2f}")


# -- memory ----------------------------------------------------------------------------------
class RssWatch:
    """Peak resident set size of this process above a baseline, sampled every 5 ms by a thread.

    Used only around index builds and quality passes, never while latency is timed.
    """

    def __init__(self):
        self.proc = psutil.Process()

    def __enter__(self):
        gc.collect()
        self.base = self.proc.memory_info().rss
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def sample(self) -> None:
        self.peak = max(self.peak, self.proc.memory_info().rss)

    def retained_mb(self) -> float:
        gc.collect()
        return round((self.proc.memory_info().rss - self.base) / 2**20, 1)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.sample()
        self.peak_mb = round((self.peak - self.base) / 2**20, 1)


def process_maxrss_mb() -> float:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux
    return round(kb / 1024, 1)


# -- systems ---------------------------------------------------------------------------------
def simple_tokenize(text: str) -> list[str]:
    """rank-bm25's tokenizer here: lowercase, regex ``\\w+`` words; no stemming, no stopwords."""
    return _TOKEN_RE.findall(text.lower())


def with_embeddings(docs: list[Document], vectors: np.ndarray) -> list[Document]:
    return [Document(id=d.id, content=d.content, meta=d.meta, embedding=v) for d, v in zip(docs, vectors.tolist())]


def summarize(name, ranked, relevant, lat_ms, lat_emb_ms, index_s, watch, extra=None) -> dict:
    row = quality(ranked, relevant)
    row.update(
        {
            "query_ms_p50": pct(lat_ms, 50),
            "query_ms_p95": pct(lat_ms, 95),
            "query_ms_p50_with_embedding": pct(lat_emb_ms, 50) if lat_emb_ms is not None else pct(lat_ms, 50),
            "query_ms_p95_with_embedding": pct(lat_emb_ms, 95) if lat_emb_ms is not None else pct(lat_ms, 95),
            "query_embedding_needed": name in DENSE_SYSTEMS,
            "index_s": round(index_s, 3),
            "peak_rss_mb": watch.peak_mb,
            "retained_rss_mb": watch.retained,
            "process_peak_rss_mb": process_maxrss_mb(),
            "latency_queries": len(lat_ms),
            "latency_queries_with_embedding": len(lat_emb_ms) if lat_emb_ms is not None else len(lat_ms),
        }
    )
    row.update(extra or {})
    log(f"{name}: nDCG@10 {row['ndcg@10']:.4f}  R@100 {row['recall@100']:.4f}  p50 {row['query_ms_p50']:.2f} ms  index {index_s:.2f} s")
    return row


def ids_of(docs: list[Document]) -> list[str]:
    return [d.id for d in docs]


def run_ragkit(docs, vectors, queries, qvecs, lat_idx, emb_idx, text_embedder, depths):
    """One RagIndex serves ragkit-sparse, ragkit-dense and ragkit-hybrid."""
    questions = [q["question"] for q in queries]
    relevant = [q["relevant"] for q in queries]
    qlists = qvecs.tolist()
    results = {}
    with RssWatch() as watch:
        inputs = with_embeddings(docs, vectors)  # what a document embedder hands over
        index = RagIndex(embedder="all-MiniLM-L6-v2", dim=vectors.shape[1])
        t0 = time.perf_counter()
        index.add(inputs)
        add_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        index.sparse_search("warm up", 1)  # builds the bm25s side (lazy)
        sparse_s = time.perf_counter() - t0
        del inputs
        watch.retained = watch.retained_mb()
        retriever = HybridRetriever(index, embedder=text_embedder)
        log(f"ragkit index: add (chunk table + FAISS) {add_s:.2f} s, bm25s build {sparse_s:.2f} s")

        ranked = {
            "ragkit-sparse": [ids_of(index.sparse_search(q, METRIC_K)) for q in progress(questions, "ragkit-sparse quality")],
            "ragkit-dense": [ids_of(index.dense_search(v, METRIC_K)) for v in progress(qlists, "ragkit-dense quality")],
            "ragkit-hybrid": [
                ids_of(retriever.retrieve(q, top_k=METRIC_K, mode="hybrid", query_embedding=v).documents)
                for q, v in progress(list(zip(questions, qlists)), "ragkit-hybrid quality (top_k=100)")
            ],
        }
        # The realistic call is top_k=10, whose candidate lists are shallower (candidate_depth(10))
        # than those of the top_k=100 call (candidate_depth(100)), so its top 10 can differ.
        hybrid10 = [
            ids_of(retriever.retrieve(q, top_k=LATENCY_K, mode="hybrid", query_embedding=v).documents)
            for q, v in progress(list(zip(questions, qlists)), "ragkit-hybrid quality (top_k=10)")
        ]
    lat_q = [(questions[i], qlists[i]) for i in lat_idx]
    emb_q = [questions[i] for i in emb_idx]
    probe(text_embedder, "after ragkit build and quality passes", questions[:10])

    def embed(q):
        return text_embedder.run(text=q)["embedding"]

    lat = {
        "ragkit-sparse": time_calls(lambda x: index.sparse_search(x[0], LATENCY_K), lat_q, "ragkit-sparse latency"),
        "ragkit-dense": time_calls(lambda x: index.dense_search(x[1], LATENCY_K), lat_q, "ragkit-dense latency"),
        "ragkit-hybrid": time_calls(
            lambda x: retriever.retrieve(x[0], top_k=LATENCY_K, mode="hybrid", query_embedding=x[1]), lat_q, "ragkit-hybrid latency"
        ),
    }
    lat_emb = {
        "ragkit-sparse": None,
        "ragkit-dense": time_calls(lambda q: index.dense_search(embed(q), LATENCY_K), emb_q, "ragkit-dense latency+embed"),
        # no query_embedding: HybridRetriever embeds the question itself with the shared text embedder
        "ragkit-hybrid": time_calls(lambda q: retriever.retrieve(q, top_k=LATENCY_K, mode="hybrid"), emb_q, "ragkit-hybrid latency+embed"),
    }
    # what the top_k=100 call costs, for reference (the metrics above come from it)
    lat100 = time_calls(
        lambda x: retriever.retrieve(x[0], top_k=METRIC_K, mode="hybrid", query_embedding=x[1]), lat_q, "ragkit-hybrid latency top_k=100"
    )
    embed_only = time_calls(embed, emb_q, "query embedding alone")

    build = {"ragkit-sparse": add_s + sparse_s, "ragkit-dense": add_s, "ragkit-hybrid": add_s + sparse_s}
    shared = {
        "index_breakdown_s": {"add_chunk_table_and_faiss": round(add_s, 3), "bm25s_build": round(sparse_s, 3)},
        "shared_index": "one RagIndex serves ragkit-sparse/-dense/-hybrid; its memory is reported for each",
    }
    for name in ("ragkit-sparse", "ragkit-dense", "ragkit-hybrid"):
        extra = dict(shared)
        if name == "ragkit-hybrid":
            extra["candidate_depth"] = {"top_k=100 call (metrics)": ragkit_retrieval.candidate_depth(METRIC_K), "top_k=10 call (latency)": ragkit_retrieval.candidate_depth(LATENCY_K)}
            extra["top_k10_call_metrics"] = quality(hybrid10, relevant)
            extra["query_ms_p50_top_k100"] = pct(lat100, 50)
            extra["query_ms_p95_top_k100"] = pct(lat100, 95)
        results[name] = summarize(name, ranked[name], relevant, lat[name], lat_emb[name], build[name], watch, extra)

    # Fusion candidate depth sweep for the top_k=10 call: depth 30 is ragkit's default (the hybrid10 pass
    # above) and depth 300 is what the top_k=100 call used (its first 10 results are the same fusion).
    default_depth = ragkit_retrieval.candidate_depth(LATENCY_K)
    sweep = {
        str(default_depth): {**quality(hybrid10, relevant), "query_ms_p50": pct(lat["ragkit-hybrid"], 50), "note": "ragkit default for top_k=10"},
        str(ragkit_retrieval.candidate_depth(METRIC_K)): {
            **quality([ids[:LATENCY_K] for ids in ranked["ragkit-hybrid"]], relevant),
            "query_ms_p50": pct(lat100, 50),
            "note": "top 10 of the top_k=100 call (the headline metrics)",
        },
    }
    if depths:
        original = ragkit_retrieval.candidate_depth
        try:
            for depth in [d for d in depths if str(d) not in sweep]:
                # monkeypatched in this process only; ragkit's code is unchanged
                ragkit_retrieval.candidate_depth = lambda top_k, d=depth: max(d, top_k)
                runs = [
                    ids_of(retriever.retrieve(q, top_k=LATENCY_K, mode="hybrid", query_embedding=v).documents)
                    for q, v in progress(list(zip(questions, qlists)), f"fusion depth {depth}")
                ]
                ms = time_calls(
                    lambda x: retriever.retrieve(x[0], top_k=LATENCY_K, mode="hybrid", query_embedding=x[1]), lat_q[:300], f"fusion depth {depth} latency"
                )
                sweep[str(depth)] = {**quality(runs, relevant), "query_ms_p50": pct(ms, 50)}
        finally:
            ragkit_retrieval.candidate_depth = original
    sweep = dict(sorted(sweep.items(), key=lambda kv: int(kv[0])))
    for depth, row in sweep.items():
        log(f"fusion candidate depth {depth}: nDCG@10 {row['ndcg@10']:.4f}  R@10 {row['recall@10']:.4f}  p50 {row['query_ms_p50']:.2f} ms")
    del retriever, index
    gc.collect()
    return results, sweep, pct(embed_only, 50), pct(embed_only, 95)


def run_haystack_bm25(docs, queries, lat_idx):
    questions = [q["question"] for q in queries]
    with RssWatch() as watch:
        inputs = [Document(id=d.id, content=d.content, meta=d.meta) for d in docs]
        t0 = time.perf_counter()
        store = InMemoryDocumentStore(shared=False)  # defaults: BM25L, regex tokenizer, no stemming
        store.write_documents(inputs)
        retriever = InMemoryBM25Retriever(document_store=store, top_k=METRIC_K)
        index_s = time.perf_counter() - t0
        del inputs
        watch.retained = watch.retained_mb()
        ranked = [ids_of(retriever.run(query=q, top_k=METRIC_K)["documents"]) for q in progress(questions, "haystack-bm25 quality")]
    lat = time_calls(lambda q: retriever.run(query=q, top_k=LATENCY_K), [questions[i] for i in lat_idx], "haystack-bm25 latency")
    row = summarize("haystack-bm25", ranked, [q["relevant"] for q in queries], lat, None, index_s, watch, {"bm25_algorithm": store.bm25_algorithm})
    del retriever, store
    gc.collect()
    return row


def run_haystack_embedding(docs, vectors, queries, qvecs, lat_idx, emb_idx, text_embedder):
    qlists = qvecs.tolist()
    with RssWatch() as watch:
        inputs = with_embeddings(docs, vectors)
        t0 = time.perf_counter()
        # dot product == cosine here: MiniLM vectors are L2-normalised (normalize_embeddings=True)
        store = InMemoryDocumentStore(shared=False)
        store.write_documents(inputs)
        retriever = InMemoryEmbeddingRetriever(document_store=store, top_k=METRIC_K)
        index_s = time.perf_counter() - t0
        del inputs
        watch.retained = watch.retained_mb()
        ranked = [ids_of(retriever.run(query_embedding=v, top_k=METRIC_K)["documents"]) for v in progress(qlists, "haystack-embedding quality")]
    questions = [q["question"] for q in queries]
    lat = time_calls(lambda v: retriever.run(query_embedding=v, top_k=LATENCY_K), [qlists[i] for i in lat_idx], "haystack-embedding latency")
    lat_emb = time_calls(
        lambda q: retriever.run(query_embedding=text_embedder.run(text=q)["embedding"], top_k=LATENCY_K),
        [questions[i] for i in emb_idx],
        "haystack-embedding latency+embed",
    )
    row = summarize("haystack-embedding", ranked, [q["relevant"] for q in queries], lat, lat_emb, index_s, watch)
    del retriever, store
    gc.collect()
    return row


def run_rank_bm25(docs, queries, lat_idx):
    questions = [q["question"] for q in queries]
    with RssWatch() as watch:
        ids = [d.id for d in docs]
        t0 = time.perf_counter()
        bm25 = BM25Okapi([simple_tokenize(d.content) for d in docs])
        index_s = time.perf_counter() - t0
        watch.retained = watch.retained_mb()

        def search(q, k):
            scores = bm25.get_scores(simple_tokenize(q))
            return [ids[i] for i in np.argsort(-scores)[:k]]

        ranked = [search(q, METRIC_K) for q in progress(questions, "rank-bm25 quality")]
    lat = time_calls(lambda q: search(q, LATENCY_K), [questions[i] for i in lat_idx], "rank-bm25 latency")
    row = summarize(
        "rank-bm25", ranked, [q["relevant"] for q in queries], lat, None, index_s, watch,
        {"tokenizer": "lowercase regex \\w+, no stemming, no stopwords; BM25Okapi defaults (k1=1.5, b=0.75, epsilon=0.25)"},
    )
    del bm25
    gc.collect()
    return row


# -- scale -----------------------------------------------------------------------------------
def run_scale(docs, vectors, queries, qvecs, n_chunks, n_queries, noise, seed, text_embedder):
    """Latency only: >= n_chunks chunks made by replicating SQuAD paragraphs with perturbed vectors."""
    replicas = math.ceil(n_chunks / len(docs))
    rng = np.random.default_rng(seed)
    pick = random.Random(seed + 1).sample(range(len(queries)), min(n_queries, len(queries)))
    questions = [queries[i]["question"] for i in pick]
    qlists = [qvecs[i].tolist() for i in pick]
    prep_s = add_s = 0.0
    blocks = []  # the vectors in insertion order, for the exact-search check below (not part of the index's memory)
    with RssWatch() as watch:
        index = RagIndex(embedder="all-MiniLM-L6-v2", dim=vectors.shape[1])
        for r in progress(range(replicas), "scale: build replicas", total=replicas):
            t0 = time.perf_counter()
            if r == 0:
                block = vectors
            else:
                block = vectors + rng.normal(0.0, noise, size=vectors.shape).astype("float32")
                block /= np.linalg.norm(block, axis=1, keepdims=True)
            blocks.append(np.ascontiguousarray(block, dtype="float32"))
            tag = "" if r == 0 else f" replica{r}"
            batch = [
                Document(id=f"{d.id}#r{r}", content=d.content + tag, meta={**d.meta, "replica": r}, embedding=v)
                for d, v in zip(docs, block.tolist())
            ]
            prep_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            index.add(batch)
            add_s += time.perf_counter() - t0
            del batch
        t0 = time.perf_counter()
        index.sparse_search("warm up", 1)
        sparse_s = time.perf_counter() - t0
        watch.retained = watch.retained_mb()
    log(f"scale: {len(index):,} chunks; add {add_s:.1f} s, bm25s build {sparse_s:.1f} s")
    retriever = HybridRetriever(index, embedder=text_embedder)
    items = list(zip(questions, qlists))
    hyb = time_calls(lambda x: retriever.retrieve(x[0], top_k=LATENCY_K, mode="hybrid", query_embedding=x[1]), items, "scale: hybrid")
    sparse = time_calls(lambda x: retriever.retrieve(x[0], top_k=LATENCY_K, mode="sparse"), items, "scale: sparse")
    dense = time_calls(lambda x: retriever.retrieve(x[0], top_k=LATENCY_K, mode="dense", query_embedding=x[1]), items, "scale: dense")
    depth = ragkit_retrieval.candidate_depth(LATENCY_K)
    d_depth = time_calls(lambda x: index.dense_search(x[1], depth), items, "scale: dense_search at depth")
    s_depth = time_calls(lambda x: index.sparse_search(x[0], depth), items, "scale: sparse_search at depth")
    hyb_emb = time_calls(lambda x: retriever.retrieve(x[0], top_k=LATENCY_K, mode="hybrid"), items, "scale: hybrid+embed")
    # How much the dense side (exact or approximate, whatever RagIndex chose) agrees with exact search
    # over the same vectors. Replicas are near-duplicates, so chunk-level agreement understates it;
    # paragraph-level agreement (replica tag stripped) is the one that matters for answers.
    exact = faiss.IndexFlatIP(vectors.shape[1])
    exact.add(np.vstack(blocks))
    del blocks
    row_id = lambda row: f"{docs[row % len(docs)].id}#r{row // len(docs)}"  # noqa: E731
    chunk_hits = para_hits = para_total = 0
    for _, v in progress(items, "scale: dense vs exact"):
        got = [d.id for d in index.dense_search(v, LATENCY_K)]
        q = np.asarray([v], dtype="float32")
        faiss.normalize_L2(q)
        want = [row_id(int(r)) for r in exact.search(q, LATENCY_K)[1][0]]
        chunk_hits += len(set(got) & set(want))
        want_p = {w.split("#")[0] for w in want}
        para_hits += len(want_p & {g.split("#")[0] for g in got})
        para_total += len(want_p)
    del exact
    out = {
        "chunks": len(index),
        "dense_index": type(faiss.downcast_index(index._dense.index)).__name__,
        "replicas": replicas,
        "vectors": f"the {len(docs)} real MiniLM paragraph vectors replicated {replicas}x; replicas 1.. get Gaussian noise "
        f"(sigma={noise} per dimension, seed={seed}) and are re-normalised. Texts are the real paragraphs, replicas 1.. "
        "with a 'replica<N>' token appended so BM25 rows differ. Latency only, no quality metrics.",
        "queries": len(items),
        "hybrid_query_ms_p50": pct(hyb, 50),
        "hybrid_query_ms_p95": pct(hyb, 95),
        "hybrid_query_ms_p50_with_embedding": pct(hyb_emb, 50),
        "hybrid_query_ms_p95_with_embedding": pct(hyb_emb, 95),
        "sparse_query_ms_p50": pct(sparse, 50),
        "sparse_query_ms_p95": pct(sparse, 95),
        "dense_query_ms_p50": pct(dense, 50),
        "dense_query_ms_p95": pct(dense, 95),
        "hybrid_parts_ms_p50": {f"dense_search(top_k={depth})": pct(d_depth, 50), f"sparse_search(top_k={depth})": pct(s_depth, 50)},
        "dense_recall@10_vs_exact": {
            "chunks": round(chunk_hits / (LATENCY_K * len(items)), 4),
            "paragraphs": round(para_hits / max(para_total, 1), 4),
            "note": "share of exact (IndexFlatIP) top-10 found by RagIndex.dense_search top-10 on the same vectors; "
            "paragraphs = replica tag stripped (replicas are near-duplicates, so chunk-level ties are arbitrary)",
        },
        "index_s": round(add_s + sparse_s, 2),
        "index_breakdown_s": {"add_chunk_table_and_faiss": round(add_s, 2), "bm25s_build": round(sparse_s, 2), "input_preparation_untimed": round(prep_s, 2)},
        "peak_rss_mb": watch.peak_mb,
        "retained_rss_mb": watch.retained,
        "process_peak_rss_mb": process_maxrss_mb(),
    }
    del retriever, index
    gc.collect()
    return out


# -- report ----------------------------------------------------------------------------------
def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def code_state() -> dict:
    """Which ragkit this run imported: its folder, sha256 of the retrieval sources, and the git commit
    and uncommitted changes of this checkout at the start (others may commit while this runs)."""
    import hashlib

    import ragkit

    pkg = Path(ragkit.__file__).resolve().parent
    files = ["index/store.py", "index/sparse.py", "index/retrieval.py", "components/dense_retriever.py", "components/sparse_retriever.py", "components/score_fusion.py"]
    out = {
        "ragkit_path": str(pkg),
        "ragkit_sources_sha256": {f: hashlib.sha256((pkg / f).read_bytes()).hexdigest()[:16] for f in files if (pkg / f).is_file()},
    }

    def git(*cmd):
        return subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout

    try:
        out["git_commit"] = git("rev-parse", "HEAD").strip()
        out["ragkit_uncommitted_changes"] = [line.strip() for line in git("status", "--porcelain", "ragkit").splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError):
        out["git_commit"] = "?"
    out["ragkit_is_this_checkout"] = pkg == (ROOT / "ragkit").resolve()
    return out


def machine_info() -> dict:
    import torch

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu": cpu,
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch_threads": torch.get_num_threads(),
        "versions": {
            d: version(d)
            for d in ("ragkit", "faiss-cpu", "bm25s", "haystack-ai", "rank-bm25", "sentence-transformers", "sentence-transformers-haystack", "torch", "numpy", "PyStemmer")
        },
    }


def markdown_table(systems: dict) -> str:
    head = "| system | nDCG@10 | R@1 | R@10 | R@100 | MRR@10 | p50 ms | p95 ms | p50 ms with embedding | index s | RSS MB |"
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    def f(x, digits):
        return "n/a" if x is None else f"{x:.{digits}f}"

    for name, r in systems.items():
        cells = [f(r[k], 4) for k in ("ndcg@10", "recall@1", "recall@10", "recall@100", "mrr@10")]
        cells += [f(r[k], 2) for k in ("query_ms_p50", "query_ms_p95", "query_ms_p50_with_embedding", "index_s")]
        cells.append(f(r["peak_rss_mb"], 1))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="SQuAD v1.1 JSON(.gz) (default: %(default)s)")
    ap.add_argument("--max-queries", type=int, default=0, help="seeded sample of N questions for the quality metrics (default: all)")
    ap.add_argument("--latency-queries", type=int, default=1000, help="seeded sample timed one at a time without query embedding")
    ap.add_argument("--embed-latency-queries", type=int, default=300, help="seeded sample timed one at a time with query embedding")
    ap.add_argument("--scale-chunks", type=int, default=100_000, help="chunks in the latency-only scale run (0 skips it)")
    ap.add_argument("--scale-queries", type=int, default=300)
    ap.add_argument("--scale-noise", type=float, default=0.01, help="per-dimension Gaussian sigma added to replicated vectors")
    ap.add_argument("--depth-sweep", default="10,20,60,100", help="extra fusion candidate depths to try at top_k=10 (30 and 300 are always reported; empty: no extra)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-embeddings", type=Path, default=None, help="folder to keep corpus/query vectors between runs (development)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    started = time.time()
    code = code_state()  # before anything slow: others may commit while this runs
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    if not args.data.is_file():
        sys.exit(f"SQuAD file not found: {args.data} (pass --data)")

    docs, queries, data_version = load_squad(args.data)
    all_questions = len(queries)
    rng = random.Random(args.seed)
    if args.max_queries and args.max_queries < len(queries):
        queries = [queries[i] for i in sorted(rng.sample(range(len(queries)), args.max_queries))]
    lat_idx = random.Random(args.seed + 10).sample(range(len(queries)), min(args.latency_queries, len(queries)))
    emb_idx = random.Random(args.seed + 20).sample(range(len(queries)), min(args.embed_latency_queries, len(queries)))
    log(f"{len(docs):,} paragraphs, {len(queries):,} of {all_questions:,} questions")

    models = ModelConfig()
    doc_embedder = build_document_embedder(models, progress_bar=True, batch_size=32)
    doc_embedder.warm_up()
    text_embedder = build_text_embedder(models)
    text_embedder.warm_up()
    probe_q = [q["question"] for q in queries[:10]]
    probe(text_embedder, "start", probe_q)
    cache = None
    if args.cache_embeddings:
        key = f"{args.data.stem}-{len(docs)}-{len(queries)}-{args.seed}-{args.max_queries}"
        cache = args.cache_embeddings / f"retrieval_squad-{key}.npz"
    if cache is not None and cache.is_file():
        saved = np.load(cache)
        vectors, qvecs = saved["corpus"], saved["queries"]
        corpus_embed_s, query_embed_s = float(saved["corpus_s"]), float(saved["queries_s"])
        log(f"embeddings read from {cache} (timings are from the run that wrote it)")
    else:
        t0 = time.perf_counter()
        embedded = doc_embedder.run(documents=docs)["documents"]
        corpus_embed_s = time.perf_counter() - t0
        vectors = np.asarray([d.embedding for d in embedded], dtype="float32")
        log(f"corpus embedded in {corpus_embed_s:.1f} s")
        t0 = time.perf_counter()
        qdocs = doc_embedder.run(documents=[Document(content=q["question"]) for q in queries])["documents"]
        query_embed_s = time.perf_counter() - t0
        qvecs = np.asarray([d.embedding for d in qdocs], dtype="float32")
        del embedded, qdocs
        log(f"{len(queries):,} questions embedded (batched) in {query_embed_s:.1f} s")
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            np.savez(cache, corpus=vectors, queries=qvecs, corpus_s=corpus_embed_s, queries_s=query_embed_s)
    probe(text_embedder, "after corpus embedding", probe_q)

    depths = [int(x) for x in args.depth_sweep.split(",") if x.strip()]
    systems = {}
    ragkit_rows, sweep, embed_p50, embed_p95 = run_ragkit(docs, vectors, queries, qvecs, lat_idx, emb_idx, text_embedder, depths)
    systems.update(ragkit_rows)
    probe(text_embedder, "after ragkit", probe_q)
    systems["haystack-bm25"] = run_haystack_bm25(docs, queries, lat_idx)
    probe(text_embedder, "after haystack-bm25", probe_q)
    systems["haystack-embedding"] = run_haystack_embedding(docs, vectors, queries, qvecs, lat_idx, emb_idx, text_embedder)
    systems["rank-bm25"] = run_rank_bm25(docs, queries, lat_idx)
    probe(text_embedder, "after rank-bm25", probe_q)
    systems = {name: systems[name] for name in SYSTEMS}

    scale = {"chunks": 0, "hybrid_query_ms_p50": None, "hybrid_query_ms_p95": None, "skipped": True}
    if args.scale_chunks > 0:
        scale = run_scale(docs, vectors, queries, qvecs, args.scale_chunks, args.scale_queries, args.scale_noise, args.seed, text_embedder)
        probe(text_embedder, "after scale run", probe_q)

    hybrid = systems["ragkit-hybrid"]
    others = {n: r["ndcg@10"] for n, r in systems.items() if n != "ragkit-hybrid"}
    best_other = max(others, key=others.get)
    speedup = systems["haystack-bm25"]["query_ms_p50"] / systems["ragkit-sparse"]["query_ms_p50"]
    targets = {
        "hybrid_ndcg10_ge_every_other": {
            "met": hybrid["ndcg@10"] >= others[best_other],
            "hybrid": hybrid["ndcg@10"],
            "best_other": best_other,
            "best_other_ndcg@10": others[best_other],
        },
        "sparse_p50_10x_faster_than_haystack_bm25": {"met": speedup >= 10, "speedup": round(speedup, 1)},
        "hybrid_p50_le_10ms_at_100k": {
            "met": bool(scale.get("chunks", 0) >= 100_000 and scale["hybrid_query_ms_p50"] is not None and scale["hybrid_query_ms_p50"] <= 10),
            "chunks": scale.get("chunks", 0),
            "hybrid_query_ms_p50": scale["hybrid_query_ms_p50"],
        },
    }
    result = {
        "dataset": f"SQuAD v{data_version} dev ({args.data.name}): one document per paragraph, relevant = the question's own paragraph",
        "corpus_docs": len(docs),
        "queries": len(queries),
        "questions_in_file": all_questions,
        "metric_top_k": METRIC_K,
        "latency_top_k": LATENCY_K,
        "latency_note": (
            f"query_ms_* = one query at a time, top_k={LATENCY_K}, on a seeded sample of {len(lat_idx)} questions, query embedding "
            f"precomputed; *_with_embedding = the text embedder embeds each question one at a time first ({len(emb_idx)} questions; "
            "sparse systems embed nothing, so both are the same measurement). Metrics come from top_k=100 calls."
        ),
        "memory_note": (
            "peak_rss_mb = peak process RSS (psutil, sampled every 5 ms) above the RSS just before the system's build, over its "
            "input preparation, build and quality pass; retained_rss_mb = RSS after the build with inputs freed, minus that "
            "baseline (allocator reuse makes both approximate); process_peak_rss_mb = ru_maxrss of the whole process so far "
            "(cumulative: includes the embedding model, the data and every earlier system)."
        ),
        "embedding": {
            "model": "all-MiniLM-L6-v2 (embedded copy, 384-d, normalised)",
            "corpus_embed_s": round(corpus_embed_s, 2),
            "queries_embed_batched_s": round(query_embed_s, 2),
            "query_embed_ms_p50": embed_p50,
            "query_embed_ms_p95": embed_p95,
            "note": "dense systems' index_s excludes corpus embedding; all dense systems reuse the same vectors",
        },
        "systems": systems,
        "hybrid_depth_sweep_top_k10": sweep,
        "scale": scale,
        "targets": targets,
        "embedding_probes_ms_p50": PROBES,
        "machine": {**machine_info(), "load_average_at_end": [round(x, 2) for x in os.getloadavg()]},
        "code_at_start": code,
        "command": command,
        "wall_s": round(time.time() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    table = markdown_table(systems)
    md = [
        f"# Retrieval on SQuAD v1.1 dev: {len(docs):,} paragraphs, {len(queries):,} questions",
        "",
        table,
        "",
        f"Latency: one query at a time, top_k={LATENCY_K}; metrics from top_k={METRIC_K}. RSS MB = peak RSS increase during the "
        "system's build and quality pass (ragkit's three rows share one index). Corpus embedding "
        f"(MiniLM, {len(docs):,} paragraphs): {corpus_embed_s:.1f} s, not in index s.",
        "",
    ]
    if scale.get("chunks"):
        md += [
            f"Scale ({scale['chunks']:,} chunks, replicated SQuAD paragraphs with perturbed vectors): hybrid p50 "
            f"{scale['hybrid_query_ms_p50']:.2f} ms, p95 {scale['hybrid_query_ms_p95']:.2f} ms; sparse p50 {scale['sparse_query_ms_p50']:.2f} ms; "
            f"dense p50 {scale['dense_query_ms_p50']:.2f} ms; build {scale['index_s']:.1f} s.",
            "",
        ]
    args.out.with_suffix(".md").write_text("\n".join(md), encoding="utf-8")
    print(table)
    if scale.get("chunks"):
        print(f"\nscale: {json.dumps({k: v for k, v in scale.items() if k != 'vectors'})}")
    print(f"\ntargets: {json.dumps(targets)}")
    log(f"done in {time.time() - started:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
