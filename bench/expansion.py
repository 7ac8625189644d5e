"""Query expansion for the keyword side: does it help BM25 or hurt it?

For each question set (SQuAD v1.1 dev, SQuAD-Shifts new_wiki), over an index of *all* of the set's
paragraphs (one chunk each, the cached bench index), every question is searched with

``bm25``        BM25 alone (``RagIndex.sparse_search``), the baseline;
``bm25+prf``    :class:`~ragkit.components.query_expander.KeywordExpander` ``backend="prf"`` (pseudo-relevance
                feedback, no LLM), then :func:`expanded_sparse_search` (BM25 per query, lists fused);
``bm25+llm``    ``backend="llm"`` with the embedded model (``--model``), ragkit's short prompt, grammar-constrained;
``bm25+llm_haystack``  (opt-in) the same with Haystack ``QueryExpander``'s own prompt template;

and, unless ``--no-hybrid``, the shipped hybrid (MiniLM + FAISS and BM25, ``HybridScoreJoiner``,
candidate lists ``candidate_depth(10)`` = 30 deep) with and without the expansion on its sparse side
(the dense side always embeds the question alone).

Questions: seeded (``SEED``), none of those ``answer_quality.py`` reports (its ``sample(set, …, 200)``);
a **dev** slice (``--dev-questions``) and a disjoint **test** slice (``--questions``). prf's
``feedback_docs``, ``n_terms`` and fusion (``rrf``: Haystack's ``DocumentJoiner`` reciprocal rank
fusion; ``scaled_sum``: each list's scores over its best, summed) are chosen on dev by BM25's MRR@10
(ties: the cheaper setting); only the test slice is reported. The LLM backends have nothing tuned:
``n_expansions=2``, the code's default fusion (``rrf``); the other fusion is reported beside it as
``reference``, not chosen on anything.

Metrics on the test slice, ``top_k=10``, one gold paragraph per question: MRR@10, Recall@10,
``helped`` / ``hurt`` (questions whose gold paragraph ranks better / worse than with the same retriever
unexpanded), ``failed`` (share of questions the expander returned no expansion for, by reason),
``added_ms_p50`` (median over questions of expander + expanded search − plain BM25 search, ms; the LLM
with a cold llama.cpp prompt cache, as a question's first LLM call has in the engine) and
``llm_calls_p50`` / ``llm_calls_mean``. LLM expansions are kept per question in
``bench/results/expansion_rows/SET.MODEL.BACKEND.jsonl`` (a stopped run resumes; the figures are
recomputed from the rows).

    nice .venv/bin/python bench/expansion.py --model qwen2.5-coder-0.5b                  # prf + llm, both sets
    .venv/bin/python bench/expansion.py --backends prf --questions 20 --dev-questions 20 --out /tmp/expansion.json

Writes ``bench/results/expansion.json`` (``--out`` elsewhere).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

from answer_quality import SETS, sample
from squad_common import CACHE, ROOT, run_facts
from tqdm import tqdm

from ragkit.components.query_expander import FUSIONS, KeywordExpander, expanded_sparse_search
from ragkit.components.score_fusion import DEFAULT_SPARSE_WEIGHT, HybridScoreJoiner
from ragkit.eval.experiments import index_documents, load_squad_corpus
from ragkit.index.retrieval import candidate_depth

OUT = ROOT / "bench" / "results" / "expansion.json"
ROWS = ROOT / "bench" / "results" / "expansion_rows"
SEED = 163  # issue 16, item 3
TOP_K = 10
DEFAULT_FUSION = "rrf"  # expanded_sparse_search's default
PRF_GRID = {"feedback_docs": (1, 2, 3, 5, 10), "n_terms": (2, 3, 5, 8, 12), "fusion": FUSIONS}
LLM_BACKENDS = ("llm", "llm_haystack")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def slices(set_name: str, questions: list[dict], n_dev: int, n_test: int) -> tuple[list[dict], list[dict]]:
    """(dev, test): disjoint, seeded, none of answer_quality's reported questions."""
    reported = {q["id"] for q in sample(set_name, questions, 200)}
    pool = [q for q in questions if q["id"] not in reported]
    random.Random(SEED).shuffle(pool)
    if n_dev + n_test > len(pool):
        raise SystemExit(f"{set_name}: {n_dev} dev + {n_test} test questions asked, {len(pool)} available")
    return pool[:n_dev], pool[n_dev:n_dev + n_test]


def rank_of(docs, gold: str) -> int | None:
    ids = [d.id for d in docs[:TOP_K]]
    return ids.index(gold) + 1 if gold in ids else None


def metrics(ranks: list[int | None], base: list[int | None] | None = None) -> dict:
    n = max(len(ranks), 1)
    out = {"mrr@10": round(sum(1 / r for r in ranks if r) / n, 4), "recall@10": round(sum(r is not None for r in ranks) / n, 4)}
    if base is not None:  # paired against the same retriever unexpanded: lower rank is better, absent is worst
        key = lambda r: r if r is not None else TOP_K + 1  # noqa: E731
        out["helped"] = sum(key(r) < key(b) for r, b in zip(ranks, base))
        out["hurt"] = sum(key(r) > key(b) for r, b in zip(ranks, base))
    return out


class Searcher:
    """Plain, expanded and hybrid retrieval over one index, with the question vectors precomputed."""

    def __init__(self, index, questions: list[dict], hybrid: bool):
        self.index = index
        self.depth = candidate_depth(TOP_K)
        self.joiner = HybridScoreJoiner(sparse_weight=DEFAULT_SPARSE_WEIGHT, top_k=TOP_K)
        self.dense: dict[str, list] = {}
        if hybrid:
            from ragkit.llm.generators import shared_text_embedder

            embedder = shared_text_embedder(index.embedder)
            t0 = time.perf_counter()
            vectors = embedder.embedding_backend.embed([q["question"] for q in questions], normalize_embeddings=True, show_progress_bar=False)
            log(f"embedded {len(questions)} questions in {time.perf_counter() - t0:.1f} s")
            self.dense = {q["id"]: index.dense_search(v, self.depth) for q, v in zip(questions, vectors)}

    def sparse(self, queries: list[str], fusion: str = DEFAULT_FUSION, top_k: int = TOP_K):
        return expanded_sparse_search(self.index, queries, top_k, fusion=fusion)

    def hybrid(self, qid: str, queries: list[str], fusion: str = DEFAULT_FUSION):
        sparse = self.sparse(queries, fusion, top_k=self.depth)
        return self.joiner.run(dense_documents=self.dense[qid], sparse_documents=sparse)["documents"]


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, (time.perf_counter() - t0) * 1000


# -- prf: tune on dev, report on test --------------------------------------------------------------
def tune_prf(index, dev: list[dict]) -> tuple[dict, list[dict]]:
    searcher = Searcher(index, dev, hybrid=False)
    grid = []
    for feedback_docs in PRF_GRID["feedback_docs"]:
        for n_terms in PRF_GRID["n_terms"]:
            expander = KeywordExpander(backend="prf", index=index, feedback_docs=feedback_docs, n_terms=n_terms)
            expanded = {q["id"]: expander.run(query=q["question"])["queries"] for q in dev}
            for fusion in PRF_GRID["fusion"]:
                ranks = [rank_of(searcher.sparse(expanded[q["id"]], fusion), q["doc_id"]) for q in dev]
                grid.append({"feedback_docs": feedback_docs, "n_terms": n_terms, "fusion": fusion, **metrics(ranks)})
            # for reference only (not a choice the code offers): the expanded query alone, classic PRF
            ranks = [rank_of(index.sparse_search(expanded[q["id"]][-1], TOP_K), q["doc_id"]) for q in dev]
            grid.append({"feedback_docs": feedback_docs, "n_terms": n_terms, "fusion": "expanded_query_only (reference)", **metrics(ranks)})
    baseline = metrics([rank_of(index.sparse_search(q["question"], TOP_K), q["doc_id"]) for q in dev])
    eligible = [g for g in grid if g["fusion"] in FUSIONS]
    # best MRR@10; among equals the cheaper setting (fewer feedback chunks, fewer terms)
    best = min(eligible, key=lambda g: (-g["mrr@10"], g["feedback_docs"], g["n_terms"], FUSIONS.index(g["fusion"])))
    chosen = {k: best[k] for k in ("feedback_docs", "n_terms", "fusion")}
    at_chosen = {k: best[k] for k in ("mrr@10", "recall@10")}
    return {"chosen": chosen, "dev_at_chosen": at_chosen, "dev_bm25": baseline, "dev_beats_bm25": at_chosen["mrr@10"] > baseline["mrr@10"]}, grid


# -- expansions per test question ------------------------------------------------------------------
def prf_rows(index, test: list[dict], chosen: dict) -> list[dict]:
    expander = KeywordExpander(backend="prf", index=index, feedback_docs=chosen["feedback_docs"], n_terms=chosen["n_terms"])
    for q in test[:5]:  # warm caches (bm25s document frequencies) outside the timings
        expander.run(query=q["question"])
    rows = []
    for q in tqdm(test, desc="prf", file=sys.stderr, mininterval=10):
        out, ms = timed(expander.run, query=q["question"])
        rows.append({"id": q["id"], "queries": out["queries"], "terms": out["terms"], "failed": out["failed"], "expand_ms": ms, "llm_calls": 0})
    return rows


def counting(generator) -> list[int]:
    """Count the generator's calls (its ``run`` wrapped on the instance, so its type — which decides the
    grammar — is unchanged)."""
    calls = [0]
    run = generator.run

    def counted(*args, **kwargs):
        calls[0] += 1
        return run(*args, **kwargs)

    generator.run = counted
    return calls


def llm_rows(set_name: str, model: str, backend: str, test: list[dict], generator, calls: list[int]) -> list[dict]:
    from haystack.components.query.query_expander import DEFAULT_PROMPT_TEMPLATE

    from ragkit.llm.generators import reset_prompt_cache

    path = ROWS / f"{set_name}.{model}.{backend}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    done = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["id"]] = row
    template = DEFAULT_PROMPT_TEMPLATE if backend == "llm_haystack" else None
    expander = KeywordExpander(backend="llm", chat_generator=generator, prompt_template=template)
    todo = [q for q in test if q["id"] not in done]
    if todo:
        expander.run(query="Warm-up: when was the Eiffel Tower finished?")
    with path.open("a", encoding="utf-8") as out:
        for q in tqdm(todo, desc=f"{set_name} {backend}", file=sys.stderr, mininterval=10):
            reset_prompt_cache(generator)
            before = calls[0]
            result, ms = timed(expander.run, query=q["question"])
            row = {"id": q["id"], "queries": result["queries"], "terms": result["terms"], "failed": result["failed"], "expand_ms": ms, "llm_calls": calls[0] - before}
            out.write(json.dumps(row) + "\n")
            out.flush()
            done[q["id"]] = row
    return [done[q["id"]] for q in test]


# -- the report ------------------------------------------------------------------------------------
def evaluate(searcher: Searcher, test: list[dict], rows: list[dict], fusion: str, hybrid: bool, base: dict) -> dict:
    by_id = {r["id"]: r for r in rows}
    sparse_ranks, added_ms = [], []
    for q in test:
        row = by_id[q["id"]]
        docs, search_ms = timed(searcher.sparse, row["queries"], fusion)
        sparse_ranks.append(rank_of(docs, q["doc_id"]))
        added_ms.append(row["expand_ms"] + search_ms - base["sparse_ms"][q["id"]])
    failed: dict[str, int] = {}
    for r in rows:
        if r["failed"]:
            reason = r["failed"].split(":")[0]
            failed[reason] = failed.get(reason, 0) + 1
    calls = [r["llm_calls"] for r in rows]
    out = {
        "fusion": fusion,
        "sparse": metrics(sparse_ranks, base["sparse_ranks"]),
        "added_ms_p50": round(statistics.median(added_ms), 2),
        "expand_ms_p50": round(statistics.median(r["expand_ms"] for r in rows), 2),
        "llm_calls_p50": statistics.median(calls), "llm_calls_mean": round(statistics.mean(calls), 3),
        "expanded_share": round(sum(len(r["queries"]) > 1 for r in rows) / len(rows), 4),
        "terms_mean": round(statistics.mean(len(r["terms"]) for r in rows), 2),
        "failed": failed,
    }
    if hybrid:
        out["hybrid"] = metrics([rank_of(searcher.hybrid(q["id"], by_id[q["id"]]["queries"], fusion), q["doc_id"]) for q in test], base["hybrid_ranks"])
    return out


def examples(test: list[dict], rows: list[dict], searcher: Searcher, fusion: str, base: dict, n: int = 3) -> dict:
    """A few test questions the expansion moved the gold paragraph up for, and down for."""
    by_id = {r["id"]: r for r in rows}
    helped, hurt = [], []
    for q, before in zip(test, base["sparse_ranks"]):
        row = by_id[q["id"]]
        after = rank_of(searcher.sparse(row["queries"], fusion), q["doc_id"])
        item = {"question": q["question"], "expansions": row["queries"][1:], "terms": row["terms"], "gold_rank_before": before, "gold_rank_after": after}
        b, a = before or TOP_K + 1, after or TOP_K + 1
        (helped if a < b else hurt if a > b else []).append(item)
    return {"helped": helped[:n], "hurt": hurt[:n]}


def run_set(set_name: str, args, generator, calls) -> dict:
    docs, questions = load_squad_corpus(SETS[set_name])
    index = index_documents(docs, CACHE / f"{set_name}_index_all-MiniLM-L6-v2")
    dev, test = slices(set_name, questions, args.dev_questions, args.questions)
    log(f"{set_name}: {len(index)} chunks, {len(dev)} dev + {len(test)} test questions")
    searcher = Searcher(index, test, hybrid=not args.no_hybrid)
    base = {"sparse_ranks": [], "sparse_ms": {}}
    for q in test[:5]:
        index.sparse_search(q["question"], TOP_K)
    for q in test:
        docs_, ms = timed(index.sparse_search, q["question"], TOP_K)
        base["sparse_ranks"].append(rank_of(docs_, q["doc_id"]))
        base["sparse_ms"][q["id"]] = ms
    report: dict = {"chunks": len(index), "dev_questions": len(dev), "test_questions": len(test)}
    results: dict = {"bm25": {**metrics(base["sparse_ranks"]), "search_ms_p50": round(statistics.median(base["sparse_ms"].values()), 2)}}
    if not args.no_hybrid:
        base["hybrid_ranks"] = [rank_of(searcher.hybrid(q["id"], [q["question"]]), q["doc_id"]) for q in test]
        results["hybrid"] = metrics(base["hybrid_ranks"])
    backends = args.backends.split(",")
    if "prf" in backends:
        t0 = time.perf_counter()
        tuning, grid = tune_prf(index, dev)
        log(f"{set_name}: prf tuned on dev in {time.perf_counter() - t0:.0f} s: {tuning['chosen']}")
        report["prf_tuning"] = {**tuning, "grid": grid}
        rows = prf_rows(index, test, tuning["chosen"])
        results["bm25+prf"] = evaluate(searcher, test, rows, tuning["chosen"]["fusion"], not args.no_hybrid, base)
        report.setdefault("examples", {})["prf"] = examples(test, rows, searcher, tuning["chosen"]["fusion"], base)
    for backend in (b for b in backends if b in LLM_BACKENDS):
        rows = llm_rows(set_name, args.model, backend, test, generator, calls)
        results[f"bm25+{backend}"] = evaluate(searcher, test, rows, DEFAULT_FUSION, not args.no_hybrid, base)
        other = next(f for f in FUSIONS if f != DEFAULT_FUSION)
        results[f"bm25+{backend}"]["reference"] = {other: evaluate(searcher, test, rows, other, not args.no_hybrid, base)["sparse"]}
        report.setdefault("examples", {})[backend] = examples(test, rows, searcher, DEFAULT_FUSION, base)
    report["test"] = results
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--backends", default="prf,llm", help="comma list of prf, llm, llm_haystack")
    parser.add_argument("--sets", default="squad_dev,new_wiki")
    parser.add_argument("--questions", type=int, default=200, help="test slice per set")
    parser.add_argument("--dev-questions", type=int, default=200, help="dev slice per set (prf's settings are chosen on it)")
    parser.add_argument("--no-hybrid", action="store_true", help="BM25 only; skip the hybrid with and without expansion")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    unknown = set(args.backends.split(",")) - {"prf", *LLM_BACKENDS}
    if unknown:
        parser.error(f"unknown backends: {', '.join(sorted(unknown))}")

    generator, calls = None, [0]
    if set(args.backends.split(",")) & set(LLM_BACKENDS):
        from ragkit.config import ModelConfig
        from ragkit.llm.generators import build_chat_generator

        generator = build_chat_generator(ModelConfig(llm=args.model))
        generator.warm_up()
        calls = counting(generator)
    sets = {name: run_set(name, args, generator, calls) for name in args.sets.split(",")}
    data = {
        "what": "BM25 with and without query expansion (prf: pseudo-relevance feedback; llm: the embedded model writes 2 alternative queries), "
                "alone and as the hybrid's sparse side; MRR@10 / Recall@10 of the gold paragraph over an index of all the set's paragraphs",
        "questions": f"seed {SEED}, none of answer_quality.py's reported sample; dev slice (prf tuned) then a disjoint test slice (reported)",
        "model": args.model if generator is not None else None,
        "top_k": TOP_K,
        "sets": sets,
        "command": "python bench/expansion.py " + " ".join(sys.argv[1:]),
        "run": run_facts(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({name: s["test"] for name, s in sets.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
