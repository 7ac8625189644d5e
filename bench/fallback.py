"""Fallback retrievers with self-reflection: does trying the next strategy put the gold paragraph in front of the answer?

No LLM: the coverage check (:mod:`ragkit.components.fallback_retriever`) and the retrieval strategies
that need none (the other modes). For each set, over all of its paragraphs, questions drawn with
``SEED`` (not among ``answer_quality.py``'s reported ones), split into a **dev** slice — where
``coverage_threshold`` is chosen, maximising Recall@k of what reaches the answer — and a disjoint
**test** slice it is reported on (the dev slice's Recall@k without a fallback is kept beside the grid). The main retrieval is each mode in turn (a weak dense main search
is where a fallback should earn its keep); the fallback strategies are the other two modes.

Per set, main mode and threshold: ``recall@k`` (gold paragraph among the ``k`` chunks the answer gets),
``mrr@k``, ``triggered`` (share of questions whose evidence was judged insufficient), ``recovered``
(share ending ``recovered``), ``added_ms_p50`` over the triggered questions (the fallback step's own time),
and the same without the fallback in the same process (``baseline``).

    .venv/bin/python bench/fallback.py            # writes bench/results/fallback.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

from answer_quality import SETS, sample
from squad_common import CACHE, ROOT, run_facts
from tqdm import tqdm

from ragkit.components.fallback_retriever import FallbackRetriever
from ragkit.components.index_retriever import IndexRetriever
from ragkit.eval.experiments import gold_rank, index_documents, load_squad_corpus

OUT = ROOT / "bench" / "results" / "fallback.json"
SEED = 61
MODES = ("dense", "sparse", "hybrid")
GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def questions_for(set_name: str, questions: list[dict], n_dev: int, n_test: int) -> tuple[list[dict], list[dict]]:
    reported = {q["id"] for q in sample(set_name, questions, 200)}
    pool = [q for q in questions if q["id"] not in reported]
    chosen = random.Random(SEED).sample(pool, n_dev + n_test)
    return chosen[:n_dev], chosen[n_dev:]


class Memo:
    """An IndexRetriever whose answers are kept, so the threshold grid on the dev slice searches each
    question once per mode; the reported test run uses the real retrievers (its milliseconds are real)."""

    def __init__(self, retriever):
        self.retriever, self.seen = retriever, {}

    def run(self, query, top_k, **kwargs):
        key = (query, top_k, repr(sorted(kwargs.items())))
        if key not in self.seen:
            self.seen[key] = self.retriever.run(query=query, top_k=top_k, **kwargs)
        return self.seen[key]


def evaluate(index, questions: list[dict], main: str, threshold: float | None, top_k: int, retrievers: dict) -> list[dict]:
    """One row per question: the gold's rank in what reaches the answer, and what the fallback did."""
    fallback = None
    if threshold is not None:
        fallback = FallbackRetriever(index=index, main_mode=main, strategies=[m for m in MODES if m != main], coverage_threshold=threshold, max_attempts=2)
        fallback._retrievers = dict(retrievers)  # the same retrievers (memoised on the dev slice) for its strategies
    rows = []
    for q in questions:
        docs = retrievers[main].run(query=q["question"], top_k=top_k)["documents"]
        row = {"id": q["id"], "exit": "off", "ms": 0.0}
        if fallback is not None:
            t0 = time.perf_counter()
            out = fallback.run(query=q["question"], documents=docs, top_k=top_k)
            row["ms"] = (time.perf_counter() - t0) * 1000
            docs, row["exit"] = out["documents"], out["fallback"]["exit_reason"]
        row["rank"] = gold_rank(docs, q["doc_id"])
        rows.append(row)
    return rows


def summary(rows: list[dict]) -> dict:
    triggered = [r for r in rows if r["exit"] not in ("off", "sufficient")]
    return {
        "n": len(rows), "recall@k": round(statistics.mean(r["rank"] is not None for r in rows), 4),
        "mrr@k": round(statistics.mean(1 / r["rank"] if r["rank"] else 0.0 for r in rows), 4),
        "triggered": round(len(triggered) / len(rows), 4), "recovered": round(sum(r["exit"] == "recovered" for r in rows) / len(rows), 4),
        "added_ms_p50": round(statistics.median(r["ms"] for r in triggered), 2) if triggered else 0.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", default="squad_dev,new_wiki")
    parser.add_argument("--dev-questions", type=int, default=200)
    parser.add_argument("--questions", type=int, default=200, help="test questions")
    parser.add_argument("--top-k", type=int, default=5)
    args = parser.parse_args()
    results: dict = {"sets": {}, "grid": list(GRID), "top_k": args.top_k}
    for set_name in [s.strip() for s in args.sets.split(",") if s.strip()]:
        docs, questions = load_squad_corpus(SETS[set_name])
        index = index_documents(docs, CACHE / f"{set_name}_index_all-MiniLM-L6-v2", progress=False)
        dev, test = questions_for(set_name, questions, args.dev_questions, args.questions)
        retrievers = {m: IndexRetriever(index=index, mode=m) for m in MODES}
        for retriever in retrievers.values():  # model loads are one-time work, not a fallback's milliseconds
            retriever.run(query="warm-up", top_k=1)
        memo = {m: Memo(r) for m, r in retrievers.items()}
        per_main = {}
        for main_mode in tqdm(MODES, desc=set_name, file=sys.stderr):
            dev_recall = {t: summary(evaluate(index, dev, main_mode, t, args.top_k, memo))["recall@k"] for t in GRID}
            chosen = max(GRID, key=lambda t: (dev_recall[t], -t))  # ties: the lower threshold (fewer fallbacks)
            dev_baseline = summary(evaluate(index, dev, main_mode, None, args.top_k, memo))["recall@k"]
            baseline = summary(evaluate(index, test, main_mode, None, args.top_k, retrievers))
            with_fallback = summary(evaluate(index, test, main_mode, chosen, args.top_k, retrievers))
            per_main[main_mode] = {"chosen_threshold": chosen, "dev_recall_without": dev_baseline, "dev_recall_by_threshold": dev_recall, "baseline": baseline, "fallback": with_fallback}
        results["sets"][set_name] = per_main
    results["split"] = f"seed {SEED}: {args.dev_questions} dev questions (threshold chosen) then {args.questions} test questions (reported), none of answer_quality.py's reported 200"
    results["command"] = "python bench/fallback.py " + " ".join(sys.argv[1:])
    results["run"] = run_facts()
    OUT.write_text(json.dumps(results, indent=1) + "\n")
    for set_name, per_main in results["sets"].items():
        for main_mode, r in per_main.items():
            print(set_name, main_mode, "threshold", r["chosen_threshold"], "baseline", r["baseline"], "fallback", r["fallback"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
