"""Where each backend stands as the corpus grows: the local index (FAISS HNSW + bm25s), PostgreSQL +
pgvector and Milvus (milvus-lite's server) at ``--chunks`` chunks.

The corpus: the 3,648 real paragraphs of SQuAD v1.1 dev and SQuAD-Shifts new_wiki with their real
all-MiniLM-L6-v2 vectors, **replicated** to ``--chunks`` with small noise on each copy's vector
(σ = 0.02 a dimension on the unit vector, renormalised) and the paragraph's text; each copy is a chunk
of its own source (100 chunks a source) with a ``shard`` field 0–99 for the filtered queries. So the
figures are latency, throughput, recall and resources at that size — not answer quality, which
replicas cannot measure (``store_parity.py`` measures that on the real corpora).

Per backend: ingest seconds (the vectors given, nothing embedded), p50 / p95 / p99 milliseconds of a
dense, a keyword and a hybrid search from one client (``--queries`` real SQuAD dev questions, embedded
once beforehand: the query embedding is excluded), hybrid questions per second with 4 concurrent
clients (threads), dense recall@10 against exact search over the same vectors (numpy), filtered
hybrid searches at 10 % and 1 % selectivity (shards) with the mean number of results returned (of 10),
the server's memory (PSS of its process tree, at the end and its peak), this process's RSS, and the data's
disk size.

A server that would take the machine's last memory is stopped, by its process id, when the memory
available falls under ``--keep-free-mb`` (a 2-core laptop swapping helps nobody), and so is one that
dies: the entry then says where it stopped (``failed``: stage, chunks written, seconds, the server's peak
memory) instead of a figure, so a size a backend cannot reach on this machine is a measured result too.

    .venv/bin/python bench/scale.py --chunks 100000 --backends local,pgvector,milvus
    .venv/bin/python bench/scale.py --chunks 1000000 --backends local
    .venv/bin/python bench/scale.py --chunks 1000000 --backends milvus --queries 20 --search-budget-s 400

Writes ``bench/results/scale.json`` (one entry per backend and size).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from answer_quality import SETS
from squad_common import CACHE, ROOT, run_facts

OUT = ROOT / "bench" / "results" / "scale.json"
PER_SOURCE = 100
NOISE = 0.02


def corpus(n: int, seed: int = 0):
    """(vectors float32 [n, d], texts, base index per chunk) replicated from the real paragraphs."""
    from ragkit.eval.experiments import index_documents, load_squad_corpus

    texts, vectors = [], []
    for name in ("squad_dev", "new_wiki"):
        docs, _ = load_squad_corpus(SETS[name])
        index = index_documents(docs, CACHE / f"{name}_index_all-MiniLM-L6-v2")
        ids = list(index.chunks)
        texts += [index.chunks[i].content for i in ids]
        vectors.append(index.vectors(ids))
    base = np.concatenate(vectors).astype("float32")
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    rng = np.random.default_rng(seed)
    which = np.arange(n) % len(base)
    out = np.empty((n, base.shape[1]), dtype="float32")
    for start in range(0, n, 50_000):
        part = which[start:start + 50_000]
        noisy = base[part] + rng.normal(scale=NOISE, size=(len(part), base.shape[1])).astype("float32")
        out[start:start + len(part)] = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
    return out, texts, which


def chunk_docs(vectors, texts, which, start: int, stop: int):
    from haystack import Document

    return [Document(id=f"c{i:07d}", content=texts[which[i]], embedding=vectors[i],
                     meta={"source": f"replica{i // PER_SOURCE:05d}.txt", "shard": int(i // PER_SOURCE % 100), "collection": "default"})
            for i in range(start, stop)]


def tree_pss_mb(pid: int) -> float:
    import psutil

    total = 0
    try:
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            try:
                total += proc.memory_full_info().pss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
    except psutil.NoSuchProcess:
        return 0.0
    return total / 2**20


def kill_tree(pid: int) -> None:
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


def server_alive(server) -> bool:
    from ragkit.index.servers import pid_alive

    return server.process.poll() is None if server.process is not None else pid_alive(server.pid)


class MemoryGuard(threading.Thread):
    """Samples a server's memory every few seconds; stops the server (SIGKILL to its process tree, by
    pid) when the machine's available memory falls under ``keep_free_mb``, and says why in ``stopped``."""

    def __init__(self, pid: int, keep_free_mb: float, every_s: float = 3.0):
        super().__init__(daemon=True)
        self.pid, self.keep_free_mb, self.every_s = pid, keep_free_mb, every_s
        self.peak_mb, self.stopped, self._done = 0.0, None, threading.Event()

    def run(self) -> None:
        import psutil

        while not self._done.wait(self.every_s):
            self.peak_mb = max(self.peak_mb, tree_pss_mb(self.pid))
            free = psutil.virtual_memory().available / 2**20
            if free < self.keep_free_mb:
                self.stopped = (f"the machine had {free:,.0f} MB available (under {self.keep_free_mb:,.0f}) with the server "
                                f"at {self.peak_mb:,.0f} MB: stopped it")
                kill_tree(self.pid)
                return

    def finish(self) -> None:
        self._done.set()
        self.join()


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / 2**20


def percentiles(ms: list[float]) -> dict:
    q = np.percentile(ms, [50, 95, 99])
    return {"p50": round(float(q[0]), 2), "p95": round(float(q[1]), 2), "p99": round(float(q[2]), 2)}


def measure(index, retriever, queries, vectors, exact_top, budget_s: float | None = None, into: dict | None = None):
    """Latency per mode, recall@10, filtered searches, 4-client throughput, each written into ``into`` as
    its stage ends (so a server that stops mid-way leaves the stages it finished) and returned.

    With ``budget_s``, each stage (the unfiltered questions in three modes, then each selectivity) stops
    asking new questions once it has run that long, after one question at least; ``searches`` says how
    many each stage asked, so a slow backend gives fewer, stated samples rather than no row."""
    out = into if into is not None else {}
    timings = {"dense": [], "sparse": [], "hybrid": []}
    recall = []
    searches = {}
    out["stage"] = "search: unfiltered"
    stage_start = time.perf_counter()
    for (text, vector), exact in zip(queries, exact_top):
        if budget_s is not None and recall and time.perf_counter() - stage_start > budget_s:
            break
        for mode in timings:
            t = time.perf_counter()
            found = retriever.retrieve(text, top_k=10, mode=mode, query_embedding=vector).documents
            timings[mode].append((time.perf_counter() - t) * 1000)
            if mode == "dense":
                recall.append(len({d.id for d in found} & exact) / 10)
    searches["unfiltered"] = len(recall)
    out.update({"latency_ms": {mode: percentiles(v) for mode, v in timings.items()}, "dense_recall@10": round(statistics.mean(recall), 4),
                "searches": searches, **({"search_budget_s": budget_s} if budget_s is not None else {})})
    filtered = out["filtered"] = {}
    for label, shards in (("10%", list(range(10))), ("1%", [0])):
        out["stage"] = f"search: filtered {label}"
        got, ms = [], []
        stage_start = time.perf_counter()
        for text, vector in queries[:100]:
            if budget_s is not None and got and time.perf_counter() - stage_start > budget_s:
                break
            t = time.perf_counter()
            found = retriever.retrieve(text, top_k=10, mode="hybrid", query_embedding=vector, filters={"shard": shards}).documents
            ms.append((time.perf_counter() - t) * 1000)
            got.append(len(found))
        filtered[label] = {"returned_of_10": round(statistics.mean(got), 2), **percentiles(ms)}
        searches[f"filtered_{label}"] = len(got)
    out["stage"] = "search: 4 clients"
    done, errors, lock, stop_at = [0], [], threading.Lock(), time.perf_counter() + 20

    def client(offset: int) -> None:
        i = offset
        try:
            while time.perf_counter() < stop_at:
                text, vector = queries[i % len(queries)]
                retriever.retrieve(text, top_k=10, mode="hybrid", query_embedding=vector)
                with lock:
                    done[0] += 1
                i += 4
        except Exception as error:  # noqa: BLE001 - raised in the main thread below: a dead client is no throughput figure
            errors.append(error)

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise RuntimeError(f"{len(errors)} of 4 clients failed: {type(errors[0]).__name__}: {str(errors[0])[:200]}") from errors[0]
    qps = done[0] / (time.perf_counter() - started)
    out["hybrid_qps_4_clients"] = float(f"{qps:.3g}")  # three significant figures: a slow server's 0.03 q/s is not 0.0
    del out["stage"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--backends", default="local,pgvector,milvus")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--keep-free-mb", type=float, default=2500, help="stop a server that leaves the machine less memory than this")
    parser.add_argument("--search-budget-s", type=float, default=None,
                        help="stop each search stage after this many seconds (one question at least); the entry says how many each asked")
    args = parser.parse_args()

    import psutil

    from ragkit.config import ModelConfig
    from ragkit.eval.experiments import load_squad_corpus
    from ragkit.index.retrieval import HybridRetriever
    from ragkit.index.servers import start_milvus, start_postgres
    from ragkit.index.store import RagIndex
    from ragkit.index.stores import open_store

    vectors, texts, which = corpus(args.chunks)
    _, questions = load_squad_corpus(SETS["squad_dev"])
    asked = [q["question"] for q in np.random.default_rng(2).choice(questions, args.queries, replace=False)]
    embedder_host = HybridRetriever(RagIndex(embedder="all-MiniLM-L6-v2", dim=vectors.shape[1]), ModelConfig())
    queries = [(q, embedder_host.embed(q)) for q in asked]
    qmatrix = np.asarray([v for _, v in queries], dtype="float32")
    qmatrix /= np.linalg.norm(qmatrix, axis=1, keepdims=True)
    exact_top = []
    for row in qmatrix:  # exact search over the same vectors, in numpy
        scores = vectors @ row
        exact_top.append({f"c{i:07d}" for i in np.argpartition(-scores, 10)[:10]})
    results = json.loads(OUT.read_text()) if OUT.exists() else {}
    for backend in args.backends.split(","):
        folder = tempfile.mkdtemp(prefix=f"ragkit-scale-{backend}-")
        server = guard = None
        stage, written, measured = "start", 0, {}
        t0 = time.perf_counter()
        try:
            if backend == "local":
                stage = "ingest"
                index = RagIndex(embedder="all-MiniLM-L6-v2", dim=vectors.shape[1], dense_index="hnsw")
                for start in range(0, args.chunks, 20_000):
                    index.add(chunk_docs(vectors, texts, which, start, min(start + 20_000, args.chunks)))
                    written = min(start + 20_000, args.chunks)
                index.save(Path(folder) / "index")
                index = RagIndex.load(Path(folder) / "index")
                retriever = HybridRetriever(index, ModelConfig(), embedder=embedder_host.embedder)
                retriever.retrieve("warm up", top_k=10, mode="hybrid", query_embedding=queries[0][1])  # builds bm25s's matrix
            else:
                server = (start_postgres if backend == "pgvector" else start_milvus)(folder)
                guard = MemoryGuard(server.pid, args.keep_free_mb)
                guard.start()
                stage = "ingest"
                index = open_store(server.url, embedder="all-MiniLM-L6-v2", dim=vectors.shape[1])
                average = float(np.mean([len(t) for t in index._tokenizer.tokens(texts)]))
                with index.write_lock():
                    for start in range(0, args.chunks, 5_000):
                        index.add(chunk_docs(vectors, texts, which, start, min(start + 5_000, args.chunks)), average_length=average)
                        written = min(start + 5_000, args.chunks)
                        if written % 100_000 == 0:
                            print(f"{backend}: {written:,} chunks in {time.perf_counter() - t0:.0f} s, server {guard.peak_mb:,.0f} MB", flush=True)
                    index.analyze()
                retriever = HybridRetriever(index, ModelConfig(), embedder=embedder_host.embedder)
            ingest_s = time.perf_counter() - t0
            stage = "search"
            entry = {"chunks": args.chunks, "ingest_s": round(ingest_s, 1),
                     **measure(index, retriever, queries, vectors, exact_top, args.search_budget_s, into=measured),
                     "server_pss_mb": round(tree_pss_mb(server.pid), 1) if server else None,
                     "ragkit_rss_mb": round(psutil.Process(os.getpid()).memory_info().rss / 2**20, 1),
                     "disk_mb": round(folder_mb(folder), 1)}
            if guard is not None:
                entry["server_peak_pss_mb"] = round(guard.peak_mb, 1)
        except Exception as error:  # noqa: BLE001 - a backend that cannot reach this size is a result to record
            if server is None or guard is None or (guard.stopped is None and server_alive(server)):
                raise  # a bug here, not the server giving out
            reason = guard.stopped or f"the server exited: {type(error).__name__}: {str(error)[:200]}"
            if measured:  # the ingest finished: the search stages done before the stop are figures too
                stage = measured.pop("stage", stage)
                measured = {"ingest_s": round(ingest_s, 1), **measured}
            entry = {"chunks": args.chunks, **measured,
                     "failed": {"stage": stage, "chunks_written": written, "seconds": round(time.perf_counter() - t0, 1),
                                "reason": reason, "server_peak_pss_mb": round(guard.peak_mb, 1),
                                "ragkit_rss_mb": round(psutil.Process(os.getpid()).memory_info().rss / 2**20, 1)}}
        finally:
            if guard is not None:
                guard.finish()
            if server is not None:
                server.stop()
            shutil.rmtree(folder, ignore_errors=True)  # a 1M-chunk run leaves ~12 GB otherwise
        results.setdefault(str(args.chunks), {})[backend] = entry
        results.setdefault("commands", {})[f"{args.chunks}/{backend}"] = "python bench/scale.py " + " ".join(sys.argv[1:])
        results.setdefault("run", {})[f"{args.chunks}/{backend}"] = run_facts()
        results["corpus"] = ("SQuAD v1.1 dev + SQuAD-Shifts new_wiki paragraphs (3,648, real all-MiniLM-L6-v2 vectors) replicated with "
                             f"N(0, {NOISE}) noise per dimension, renormalised; {PER_SOURCE} chunks a source; filters on a shard field 0-99")
        OUT.write_text(json.dumps(results, indent=1) + "\n")
        print(backend, json.dumps(entry, indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
