"""The measured experiments behind the walkthrough notebooks (and some benchmarks).

A notebook cell calls one of these and shows what it returns; the tests call the same functions,
so anything a notebook shows is checked. Every function takes the components to measure and a
question set, runs them in one process, and returns plain rows (lists of dicts) that
:mod:`ragkit.ui.plots` draws and pandas-free notebooks print as tables.

* SQuAD as a corpus: :func:`load_squad_corpus` (paragraphs → Documents, questions with the id of
  the paragraph that answers them) and :func:`index_documents` (one chunk per paragraph).
* Retrieval: :func:`retrieval_ranks` (rank of the gold paragraph per mode), :func:`recall_table`,
  :func:`wins` (the questions one mode gets and another misses), :func:`hyde_ranks`.
* Routing: :func:`load_labelled_routes`, :func:`router_accuracy`.
* Reranking and grading: :func:`rerank_and_grade`.
* Hallucination: :func:`judge_items` (supported / contradicted / unsupported answers built from
  SQuAD), :func:`judge_scores`.
* A small live ablation that separates its configurations: :func:`differing_questions`.

The corpora and question sets (:func:`load_squad_corpus`, :func:`index_documents`,
:func:`load_labelled_routes`, :func:`judge_items`, :func:`differing_questions`) are built in
:mod:`ragkit.eval.experiment_sets` and importable from here; this module runs and scores.

Rank-based retrieval metrics are a few lines over ragkit's own retrievers and need the gold
paragraph id per question, which Haystack's evaluators (document MRR/recall over ``Document``
equality) would make us rebuild as Documents anyway — so they are written here.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from typing import Any, Iterable

from haystack import Document

from ragkit.eval.experiment_sets import (  # noqa: F401  (the notebooks import these from here)
    differing_questions, index_documents, judge_items, load_labelled_routes, load_squad_corpus,
)


def _progress(items, desc: str, progress: bool):
    if not progress:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc)


# -- retrieval ------------------------------------------------------------------------------------
def gold_rank(documents: list[Document], doc_id: str) -> int | None:
    """1-based rank of the gold paragraph (or a chunk of it) among ``documents``; None if absent."""
    for rank, d in enumerate(documents, 1):
        if d.id == doc_id or d.meta.get("parent_id") == doc_id:
            return rank
    return None


def retrieval_ranks(retriever, questions: list[dict], modes: Iterable[str] = ("dense", "sparse", "hybrid"), depth: int = 20, progress: bool = True) -> list[dict]:
    """Per question, the gold paragraph's rank in each retrieval mode's top ``depth`` and the
    milliseconds each mode took (the query is embedded once, outside the timings)."""
    rows = []
    for q in _progress(questions, "retrieval", progress):
        embedding = retriever.embed(q["question"])
        row = {"question": q["question"], "doc_id": q["doc_id"], "ranks": {}, "ms": {}}
        for mode in modes:
            t0 = time.perf_counter()
            docs = retriever.retrieve(q["question"], top_k=depth, mode=mode, query_embedding=embedding).documents
            row["ms"][mode] = (time.perf_counter() - t0) * 1000
            row["ranks"][mode] = gold_rank(docs, q["doc_id"])
        rows.append(row)
    return rows


def recall_at(rows: list[dict], mode: str, k: int) -> float:
    return sum(1 for r in rows if r["ranks"][mode] is not None and r["ranks"][mode] <= k) / max(len(rows), 1)


def mrr(rows: list[dict], mode: str) -> float:
    return sum(1 / r["ranks"][mode] for r in rows if r["ranks"][mode]) / max(len(rows), 1)


def recall_table(rows: list[dict], ks: Iterable[int] = (1, 3, 5, 10)) -> list[dict]:
    """One row per mode: recall@k, MRR and median milliseconds."""
    modes = list(rows[0]["ranks"]) if rows else []
    table = []
    for mode in modes:
        entry: dict[str, Any] = {"mode": mode}
        entry.update({f"R@{k}": round(recall_at(rows, mode, k), 3) for k in ks})
        entry["MRR"] = round(mrr(rows, mode), 3)
        ms = [r["ms"][mode] for r in rows if mode in r.get("ms", {})]
        if ms:
            entry["ms p50"] = round(statistics.median(ms), 2)
        table.append(entry)
    return table


def wins(rows: list[dict], better: str, worse: str, n: int = 5) -> list[dict]:
    """Questions where ``better`` ranks the gold paragraph strictly higher than ``worse`` (a miss
    counts as rank infinity), biggest gaps first."""
    inf = float("inf")
    gaps = []
    for r in rows:
        a, b = r["ranks"][better] or inf, r["ranks"][worse] or inf
        if a < b:
            gaps.append(((b == inf), b - a if b != inf else 0, r))
    gaps.sort(key=lambda x: (x[0], x[1]), reverse=True)  # misses first, then the biggest gaps
    return [{"question": r["question"], better: r["ranks"][better], worse: r["ranks"][worse] or "miss"} for _, _, r in gaps[:n]]


def hyde_ranks(retriever, hyde, questions: list[dict], depth: int = 20, progress: bool = True) -> list[dict]:
    """Gold rank with the question's own embedding and with HyDE's (passage(s) averaged with the
    question, as in the HyDE paper), dense and hybrid; plus HyDE's seconds and its passage."""
    rows = []
    for q in _progress(questions, "HyDE", progress):
        embedding = retriever.embed(q["question"])
        t0 = time.perf_counter()
        out = hyde.run(query=q["question"], query_embedding=embedding)
        seconds = time.perf_counter() - t0
        ranks = {}
        for mode in ("dense", "hybrid"):
            ranks[mode] = gold_rank(retriever.retrieve(q["question"], top_k=depth, mode=mode, query_embedding=embedding).documents, q["doc_id"])
            ranks[mode + "+hyde"] = gold_rank(retriever.retrieve(q["question"], top_k=depth, mode=mode, query_embedding=out["embedding"]).documents, q["doc_id"])
        passages = out["hyde"].get("passages") or []
        rows.append({"question": q["question"], "doc_id": q["doc_id"], "ranks": ranks, "hyde_s": seconds, "passage": passages[0] if passages else None, "hyde": out["hyde"]})
    return rows


# -- routing --------------------------------------------------------------------------------------
def router_accuracy(router, rows: list[dict], progress: bool = False) -> dict:
    """Accuracy (overall and per class), latency, fallbacks and confusions of one router backend."""
    from ragkit.components.query_router import ROUTES

    router.warm_up()
    router.run(query="warm up")
    correct, times, fallbacks = 0, [], 0
    confusion: Counter = Counter()
    per_class: Counter = Counter()
    for row in _progress(rows, f"router ({router.backend})", progress):
        t0 = time.perf_counter()
        out = router.run(query=row["question"])
        times.append((time.perf_counter() - t0) * 1000)
        fallbacks += "fallback" in out["routing"]
        confusion[(row["label"], out["route"])] += 1
        if out["route"] == row["label"]:
            correct += 1
            per_class[row["label"]] += 1
    counts = Counter(r["label"] for r in rows)
    return {
        "accuracy": round(correct / len(rows), 4),
        "per_class_accuracy": {label: round(per_class[label] / counts[label], 4) for label in ROUTES if counts[label]},
        "ms_p50": round(statistics.median(times), 2),
        "ms_p95": round(sorted(times)[int(0.95 * (len(times) - 1))], 2),
        "fallbacks": fallbacks,
        "confusion": {f"{gold}->{pred}": n for (gold, pred), n in sorted(confusion.items()) if gold != pred},
    }


# -- reranking and grading ------------------------------------------------------------------------
def rerank_and_grade(retriever, reranker, graders: dict[str, Any], questions: list[dict], candidates: int = 10, top_k: int = 3, progress: bool = True) -> list[dict]:
    """Per question: the gold paragraph's rank among ``candidates`` hybrid results before and after
    reranking (and the reranker's ms); then each grader on the reranked top ``top_k``: what it
    kept and dropped, whether it dropped the gold paragraph, its ms."""
    rows = []
    for q in _progress(questions, "rerank + grade", progress):
        docs = retriever.retrieve(q["question"], top_k=candidates, mode="hybrid").documents
        t0 = time.perf_counter()
        reranked = reranker.run(query=q["question"], documents=docs, top_k=candidates)["documents"] if reranker is not None else docs
        row = {
            "question": q["question"], "doc_id": q["doc_id"],
            "rank_before": gold_rank(docs, q["doc_id"]), "rank_after": gold_rank(reranked, q["doc_id"]),
            "rerank_ms": (time.perf_counter() - t0) * 1000, "graders": {},
        }
        top = reranked[:top_k]
        for name, grader in graders.items():
            t0 = time.perf_counter()
            out = grader.run(query=q["question"], documents=top)
            kept = {d.id for d in out["documents"]}
            row["graders"][name] = {
                "ms": (time.perf_counter() - t0) * 1000,
                "scores": list(out["grading"].get("scores", [])),
                "kept": len(kept), "dropped": len(top) - len(kept),
                "gold_in_top": any(d.id == q["doc_id"] for d in top),
                "gold_dropped": any(d.id == q["doc_id"] for d in top) and q["doc_id"] not in kept,
                "others_dropped": sum(1 for d in top if d.id != q["doc_id"] and d.id not in kept),
                "fallback": out["grading"].get("fallback"),
            }
        rows.append(row)
    return rows


def grading_summary(rows: list[dict]) -> list[dict]:
    """Per grader: how much it dropped, how often it dropped the paragraph with the answer, ms."""
    names = list(rows[0]["graders"]) if rows else []
    out = []
    for name in names:
        g = [r["graders"][name] for r in rows]
        with_gold = [x for x in g if x["gold_in_top"]]
        others = sum(len(x["scores"]) - (1 if x["gold_in_top"] else 0) for x in g)
        out.append({
            "grader": name,
            "chunks dropped": f"{sum(x['dropped'] for x in g)}/{sum(len(x['scores']) for x in g)}",
            "gold dropped": f"{sum(x['gold_dropped'] for x in with_gold)}/{len(with_gold)}",
            "distractors dropped": f"{sum(x['others_dropped'] for x in g)}/{others}",
            "ms p50": round(statistics.median(x["ms"] for x in g), 1),
            "fallbacks": sum(1 for x in g if x["fallback"]),
        })
    return out


def rerank_question_rows(data: dict) -> list[dict]:
    """``bench/results/rerank_questions.json`` as table rows narrow enough for a laptop's notebook: per set, sample
    ("its 300": the agreement runs' paragraphs) and reranker fusion, the change against plain retrieval in MRR@5,
    R@1 and R@5 with its paired-bootstrap 95% interval."""
    def change(f: dict) -> str:
        return f"{f['change']:+.3f} [{f['interval95'][0]:+.3f},{f['interval95'][1]:+.3f}]"

    samples = {"agreement_paragraphs": "its 300", "other_paragraphs": "others"}
    return [{"set": name, "questions": f"{f['questions']} ({samples.get(part, part)})", "fusion": "1:1 (default)" if label == "rerank" else "2:1",
             **{f"{measure.upper()} Δ [95%]": change(f[label][measure]) for measure in ("mrr@5", "r@1", "r@5")}}
            for name, parts in data["sets"].items() for part, f in parts.items() for label in f if label not in ("questions", "plain")]


# -- hallucination --------------------------------------------------------------------------------
def judge_scores(detector, items: list[dict], with_question: bool = True, progress: bool = True) -> list[dict]:
    """The detector's P(supported) for every labelled item, with its milliseconds."""
    rows = []
    for item in _progress(items, "judge", progress):
        t0 = time.perf_counter()
        out = detector.run(replies=[item["answer"]], documents=item["documents"], query=item["question"] if with_question else None)
        rows.append({"kind": item["kind"], "question": item["question"], "answer": item["answer"], "score": out["score"], "ms": (time.perf_counter() - t0) * 1000})
    return rows


def balanced_accuracy(rows: list[dict], threshold: float) -> float:
    """Mean of the recall on supported items and on the others, at ``threshold``."""
    pos = [r["score"] for r in rows if r["kind"] == "supported" and r["score"] is not None]
    neg = [r["score"] for r in rows if r["kind"] != "supported" and r["score"] is not None]
    if not pos or not neg:
        raise ValueError("balanced accuracy needs scored supported and unsupported items")
    return (sum(s >= threshold for s in pos) / len(pos) + sum(s < threshold for s in neg) / len(neg)) / 2


# -- a live comparison of answer modes ------------------------------------------------------------
def compare_answer_modes(rags: dict[str, Any], questions: list[dict]) -> tuple[list[dict], dict[str, Any]]:
    """Each question answered by every engine in ``rags`` (e.g. ``{"free": …, "grounded": …}``, same
    model and index): per question the answers and their F1 against gold, and the last results per
    mode (to show one with its evidence). Questions need ``question`` and ``answers``."""
    from ragkit.eval.metrics import f1_score
    from ragkit.llm.generators import reset_prompt_cache

    rows, last = [], {}
    for q in questions:
        row: dict[str, Any] = {"question": q["question"], "gold": q["answers"][0]}
        for name, rag in rags.items():
            reset_prompt_cache(rag.chat_generator)  # each mode from a cold cache, so the seconds compare
            result = rag.ask(q["question"])
            row[name] = result.answer
            row[f"{name} F1"] = round(0.0 if result.declined else f1_score(result.answer, q["answers"]), 2)
            row[f"{name} s"] = round(result.seconds, 1)
            last.setdefault(name, []).append(result)
        rows.append(row)
    return rows, last
