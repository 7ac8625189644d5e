"""What one answered test item scores, and what a run's rows add up to — never NaN.

Per item (:func:`score_item`):

* retrieval against the chunks the item came from: recall@k, MRR and nDCG of the sources that reached
  the answer (after reranking, grading, a fallback or a hop: what each strategy changes), with
  Haystack's ``DocumentRecallEvaluator`` / ``DocumentMRREvaluator`` / ``DocumentNDCGEvaluator`` comparing
  document ids; the ``retrieve`` step's own list is kept in the row too. An item that names only the
  ``source`` file it is about (a user's own labelled question) is scored at that grain
  (:func:`source_retrieval_scores`): MRR and nDCG of the file among the distinct files the sources came
  from, recall@k whether one of the first k sources is from it;
* the answer against its gold answers: SQuAD EM and token F1 (:mod:`ragkit.eval.metrics`), semantic
  similarity (the embedder's cosine), ``correct`` (F1 ≥ 0.5; for an unanswerable item: it declined);
  a declined answerable item is a false decline;
* the local judge, each one forward pass where llama.cpp allows (:mod:`ragkit.llm.probe`): faithfulness
  (P(the sources support the answer), the hallucination detector with the question) and context
  relevance (P(the sources state the answer to the question));
* cost: seconds per step, LLM calls, prompt tokens evaluated, cache hits; the judge's seconds apart
  (``judge_seconds``), so a resumed run's plan goes at the pace its rows were measured at.

A measure that cannot be taken — no gold chunk, a judge reply that does not parse, a failed answer —
is ``None`` with its reason in the row's ``failures``, never 0 and never NaN. :func:`aggregate` averages
each measure over the rows that have it and says over how many (``{"mean", "n", "failed"}``).

Usage::

    row = score_item(item, result, judge=judge)
    aggregate([row, ...])["f1"]        # {"mean": 0.52, "n": 38, "failed": 2, ...}
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

from haystack import Document

from ragkit.eval.calibration import expected_calibration_error
from ragkit.eval.metrics import exact_match, f1_score, strip_citations
from ragkit.eval.testset import EvalItem

CORRECT_F1 = 0.5
RETRIEVAL = ("recall@k", "mrr", "ndcg")
ANSWER = ("em", "f1", "semantic_similarity", "correct")
JUDGE = ("faithfulness", "context_relevance")
COST = ("seconds", "llm_calls", "prompt_tokens", "cache_hits")


def retrieval_scores(retrieved: list[str], gold: list[str], k: int) -> dict[str, float]:
    """Recall@k (share of the gold chunks in the first k), MRR and nDCG of ``retrieved`` ids."""
    from haystack.components.evaluators import DocumentMRREvaluator, DocumentNDCGEvaluator, DocumentRecallEvaluator

    truth = [[Document(id=i, content=i) for i in gold]]
    found = [[Document(id=i, content=i) for i in retrieved]]
    top = [found[0][:k]]
    return {
        "recall@k": DocumentRecallEvaluator(mode="multi_hit", document_comparison_field="id").run(ground_truth_documents=truth, retrieved_documents=top)["score"],
        "mrr": DocumentMRREvaluator(document_comparison_field="id").run(ground_truth_documents=truth, retrieved_documents=found)["score"],
        "ndcg": DocumentNDCGEvaluator(document_comparison_field="id").run(ground_truth_documents=truth, retrieved_documents=found)["score"],
    }


def gold_files(source: str, chunk_sources: dict[str, str | None]) -> set[str]:
    """The index's files a labelled item's ``source`` names: the file of that path, or else the one file whose
    path ends in it (a user writes ``manual.pdf`` for ``docs/manual.pdf``); several such files: none, it is ambiguous."""
    files = {f for f in chunk_sources.values() if f}
    wanted = source.replace("\\", "/").strip("/")
    if wanted in files:
        return {wanted}
    ending = {f for f in files if f.endswith("/" + wanted)}
    return ending if len(ending) == 1 else set()


def source_retrieval_scores(sources: list[str], files: set[str], chunk_sources: dict[str, str | None], k: int) -> dict[str, float]:
    """Retrieval at the grain of a labelled item's file: MRR and nDCG of the file among the distinct files of
    ``sources`` (in the order their first chunk came), recall@k: one of the first k sources is from it."""
    in_order = list(dict.fromkeys(chunk_sources.get(c) or c for c in sources))
    scores = retrieval_scores(in_order, sorted(files), len(in_order) or 1)
    scores["recall@k"] = float(any(chunk_sources.get(c) in files for c in sources[:k]))
    return scores


def part_f1(answer: str, item: EvalItem) -> float:
    """A multi item: each part's gold against the answer line that scores best for it (a line that
    repeats the part's question, as a decomposed answer does, is scored without it), averaged."""
    lines = [strip_citations(line) for line in answer.splitlines() if line.strip()] or [answer]

    def best(part: dict[str, Any]) -> float:
        question = part["question"].strip()
        return max(f1_score(line[len(question):] if line.startswith(question) else line, part["answers"]) for line in lines)

    return statistics.fmean(best(part) for part in item.parts)


def answer_scores(item: EvalItem, answer: str, declined: bool) -> dict[str, Any]:
    if not item.answerable:
        return {"correct": float(declined), "correct_decline": float(declined)}
    if not item.answers:
        return {"false_decline": float(declined)}
    f1 = 0.0 if declined else (part_f1(answer, item) if item.parts else f1_score(answer, item.answers))
    return {"em": 0.0 if declined else exact_match(answer, item.answers), "f1": f1, "correct": float(f1 >= CORRECT_F1), "false_decline": float(declined)}


def score_item(item: EvalItem, result: Any, k: int, judge: Any = None, embed: Any = None, known_chunks: set[str] | None = None,
               chunk_sources: dict[str, str | None] | None = None) -> dict[str, Any]:
    """One row: the item, what the pipeline answered, every measure or the reason it is missing.
    ``chunk_sources`` (each index chunk's file) lets an item that names only its ``source`` file be scored."""
    failures: list[dict[str, str]] = []
    retrieve = result.trace.step("retrieve")
    retrieved = [doc_id for doc_id, _ in retrieve.docs_out] if retrieve else [d.id for d in result.sources]
    row: dict[str, Any] = {
        "id": item.id, "kind": item.kind, "question": item.question, "gold": item.answers, "answer": result.answer,
        "declined": bool(result.declined), "failed": bool(result.failed), "confidence": result.confidence, "exit_reason": result.exit_reason,
        "route": result.route, "sources": [d.id for d in result.sources], "retrieved": retrieved, "gold_chunks": item.chunks,
        "failed_steps": list(result.failed_steps), "error": result.error,
        # an LLM reply served from the cache counts the seconds it took when it was made, so a rerun's latency
        # is the run's, not the cache's
        "seconds": round(result.seconds + result.trace.cache_seconds, 4),
        "step_seconds": {s.name: round(s.seconds + s.cache_seconds, 4) for s in result.trace.steps},
        "llm_calls": result.trace.llm_calls, "prompt_tokens": result.trace.prompt_tokens_evaluated, "cache_hits": result.trace.cache_hits,
    }
    gold = [c for c in item.chunks if known_chunks is None or c in known_chunks]
    files = gold_files(item.source, chunk_sources) if item.source and not item.chunks and chunk_sources is not None else set()
    if gold:
        row.update({m: round(v, 4) for m, v in retrieval_scores(row["sources"], gold, k).items()})
    elif files:
        row["gold_source"] = sorted(files)[0]
        row.update({m: round(v, 4) for m, v in source_retrieval_scores(row["sources"], files, chunk_sources, k).items()})
    elif item.answerable:
        reason = ("its chunks are no longer in the index" if item.chunks else
                  f"its source {item.source!r} is not one file of this index" if item.source and chunk_sources is not None else
                  "the item names no chunk of this index")
        failures.append({"metric": "retrieval", "reason": reason})
    if result.failed:
        failures.append({"metric": "answer", "reason": f"the pipeline failed: {result.error or result.exit_reason}"})
    else:
        row.update({m: round(v, 4) for m, v in answer_scores(item, result.answer, bool(result.declined)).items()})
        if embed is not None and item.answers and not result.declined:
            row["semantic_similarity"] = round(embed(strip_citations(result.answer), item.answers), 4)
    if judge is not None and not result.failed and not result.declined and result.sources:
        verdicts, row["judge_seconds"] = timed_judge(judge, item.question, result.answer, result.sources)
        for metric, (value, reason) in verdicts.items():
            if value is None:
                failures.append({"metric": metric, "reason": reason})
            else:
                row[metric] = round(value, 4)
    row["failures"] = failures
    return row


def timed_judge(judge: Any, question: str, answer: str, sources: list[Document]) -> tuple[dict[str, Any], float]:
    """The judge's verdicts and the seconds they took (a reply served from the LLM cache counts what it took when made)."""
    from haystack import tracing

    from ragkit.pipeline.trace import RagkitTracer

    started = time.perf_counter()
    with RagkitTracer().collect() as trace, tracing.tracer.trace("haystack.component.run", tags={"haystack.component.name": "judge", "haystack.component.type": "LocalJudge"}):
        verdicts = judge(question, answer, sources)
    return verdicts, round(time.perf_counter() - started + trace.cache_seconds, 4)


def _covers(failure: str, metric: str) -> bool:
    """Whether a failure recorded as ``failure`` is why ``metric`` is missing from a row."""
    return failure == metric or (failure == "retrieval" and metric in RETRIEVAL) or (
        failure == "answer" and metric in (*ANSWER, "correct_decline", "false_decline", *JUDGE))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each measure's mean over the rows that have it, with ``n`` and how many rows could not give it."""
    out: dict[str, Any] = {"rows": len(rows)}
    measures = [*RETRIEVAL, *ANSWER, "correct_decline", "false_decline", *JUDGE, "llm_calls", "prompt_tokens", "cache_hits"]
    for metric in measures:
        values = [r[metric] for r in rows if r.get(metric) is not None]
        failed = sum(1 for r in rows if any(_covers(f["metric"], metric) for f in r.get("failures", [])))
        if values or failed:
            out[metric] = {"mean": round(statistics.fmean(values), 4) if values else None, "n": len(values), "failed": failed}
    seconds = [r["seconds"] for r in rows if r.get("seconds") is not None]
    if seconds:
        out["latency_s"] = {"p50": round(statistics.median(seconds), 3), "p95": round(percentile(seconds, 0.95), 3), "n": len(seconds)}
        steps = sorted({s for r in rows for s in r.get("step_seconds", {})})
        out["step_latency_s"] = {s: {"p50": round(statistics.median(v), 4), "p95": round(percentile(v, 0.95), 4), "n": len(v)}
                                 for s in steps if (v := [r["step_seconds"][s] for r in rows if s in r.get("step_seconds", {})])}
    scored = [(r["confidence"], bool(r["correct"])) for r in rows if r.get("confidence") is not None and r.get("correct") is not None]
    if scored:
        out["ece"] = {"value": round(expected_calibration_error([c for c, _ in scored], [y for _, y in scored]), 4), "n": len(scored)}
    kinds = sorted({r["kind"] for r in rows})
    if len(kinds) > 1:
        out["by_kind"] = {kind: {m: v for m, v in aggregate([r for r in rows if r["kind"] == kind]).items() if m not in ("by_kind", "step_latency_s")} for kind in kinds}
    return out
