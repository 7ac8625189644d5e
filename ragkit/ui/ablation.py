"""Timed runs outside the widgets: the one-time work (model loads, sentence vectors) done before a
question is timed, and batch ablations of Features configurations over a question set.

Apart from :mod:`ragkit.ui.panel` because neither needs a widget; the panel re-exports both.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

from ragkit.eval.metrics import exact_match, f1_score
from ragkit.pipeline.engine import AgenticRAG
from ragkit.pipeline.features import Features
from ragkit.ui import plots


def prepare_one_time(rag: AgenticRAG) -> dict[str, float]:
    """Do ``rag``'s one-time work now, before a question is timed: :meth:`AgenticRAG.prepare_one_time`."""
    return rag.prepare_one_time()


def run_ablation(
    make_rag: Callable[[Features], AgenticRAG],
    configs: dict[str, Features],
    questions: list[dict[str, Any]],
    progress: bool = True,
) -> dict[str, dict[str, Any]]:
    """Every config on every question (``{"question": …, "answers": [...]}``, answers optional),
    question-major so machine noise hits all configs alike. Returns a summary row per config.
    One-time preparation runs before the first question and is reported as ``one_time_setup_s``,
    not in the latency."""
    from tqdm.auto import tqdm

    rags = {name: make_rag(features) for name, features in configs.items()}
    setup = {name: sum(prepare_one_time(rag).values()) for name, rag in rags.items()}
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
    for q in tqdm(questions, desc="questions", disable=not progress):
        for name, rag in rags.items():
            r = rag.ask(q["question"])
            gold = q.get("answers")
            setup[name] += sum(plots.one_time_seconds(r.trace).values())
            rows[name].append({
                "seconds": plots.per_question_seconds(r), "confidence": r.confidence or 0.0, "declined": r.declined,
                "llm_calls": r.trace.llm_calls, "prompt_tokens": r.trace.prompt_tokens_evaluated,
                "em": exact_match(r.answer, gold) if gold and not r.declined else (0.0 if gold else None),
                "f1": f1_score(r.answer, gold) if gold and not r.declined else (0.0 if gold else None),
            })
    def mean(values):
        values = [v for v in values if v is not None]
        return round(statistics.fmean(values), 4) if values else None
    return {
        name: {
            "questions": len(r),
            "em": mean(x["em"] for x in r), "f1": mean(x["f1"] for x in r),
            "confidence": mean(x["confidence"] for x in r), "decline_rate": mean(float(x["declined"]) for x in r),
            "latency_s_p50": round(statistics.median(x["seconds"] for x in r), 3) if r else None,
            "llm_calls_per_q": mean(x["llm_calls"] for x in r), "prompt_tokens_per_q": mean(x["prompt_tokens"] for x in r),
            "one_time_setup_s": round(setup[name], 3),
        }
        for name, r in rows.items()
    }
