"""Choose a strategy on one half of a test set and report it on the other, so the choice cannot fool itself.

The items are split in two halves by their ids (seeded, so the split is the same every time; each kind
split evenly). Every candidate strategy runs on the **tuning half**; the one with the best quality
(``correct`` by default) whose p50 latency is within the budget is chosen, ties going to the faster.
The chosen strategy and the baseline (``plain``) then run on the **reporting half**, and that comparison
— the difference with its paired bootstrap interval (:mod:`ragkit.eval.compare`) — is the figure to
believe: the tuning half's own numbers are biased upward by the choice itself. The quality-vs-latency
Pareto front of the tuning half is named too.

The search is exhaustive over the candidates given (the built-in strategies by default, or every
on/off combination of a few toggles, :func:`toggle_space`); each run is an ordinary, resumable run
folder, so a stopped tuning goes on where it stopped.

Usage::

    report = tune(make_rag, items, strategies, latency_budget=3.0, runs_dir="runs/tune", testset_path="set.jsonl", config=config)
    report["chosen"], report["report_half"]["measures"]["correct"]
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from ragkit.config import RagConfig
from ragkit.eval.compare import compare, pareto_front, quality_and_latency
from ragkit.eval.runs import EvalRun
from ragkit.eval.strategies import BUILTIN, Strategy
from ragkit.eval.testset import EvalItem
from ragkit.pipeline.features import Features


def split_halves(items: list[EvalItem], seed: int = 0) -> tuple[list[EvalItem], list[EvalItem]]:
    """(tuning half, reporting half): within each kind, items ordered by a seeded hash of their id, alternated."""
    tuning, reporting = [], []
    for kind in sorted({it.kind for it in items}):
        ordered = sorted((it for it in items if it.kind == kind), key=lambda it: hashlib.sha256(f"{seed}:{it.id}".encode()).hexdigest())
        tuning += ordered[0::2]
        reporting += ordered[1::2]
    return tuning, reporting


def toggle_space(toggles: tuple[str, ...] = ("hyde", "rerank", "grading", "routing")) -> list[Strategy]:
    """Every on/off combination of ``toggles`` on plain RAG, named by what is on."""
    out = []
    for values in itertools.product((False, True), repeat=len(toggles)):
        on = [t for t, v in zip(toggles, values) if v]
        out.append(Strategy("+".join(on) or "plain", "builtin", replace(Features(), **dict(zip(toggles, values)))))
    return out


def builtin_space(names: list[str] | None = None) -> list[Strategy]:
    return [Strategy(n, "builtin", BUILTIN[n]) for n in (names or list(BUILTIN))]


def tune(
    make_rag: Callable[[Features], Any], items: list[EvalItem], strategies: list[Strategy], latency_budget: float | None, runs_dir: str | Path,
    testset_path: str | Path, config: RagConfig, judge: Any = None, cache: Any = None, quality: str = "correct", seed: int = 0,
    baseline: str = "plain", known_chunks: set[str] | None = None, progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """``progress(what, done, total)`` hears each run start ("tune half: plain") and each question it finishes."""
    runs_dir = Path(runs_dir)
    tuning, reporting = split_halves(items, seed)

    def run(strategy: Strategy, half: list[EvalItem], which: str) -> dict[str, Any]:
        rag = make_rag(strategy.features)
        folder = runs_dir / f"{which}-{strategy.label.replace('+', '_')}"
        evaluation = EvalRun.open(folder, strategy, config, testset_path, half, known_chunks=known_chunks,
                                  judge_model=getattr(judge, "label", None), chat_generator=getattr(rag, "chat_generator", None))
        what = f"{which} half: {strategy.label}"
        if progress:
            progress(what, len(evaluation.done), len(evaluation.items))
        evaluation.execute(rag, judge=judge, cache=cache, progress=(lambda done, total: progress(what, done, total)) if progress else None)
        return {"run": evaluation.meta, "rows": evaluation.rows(), "aggregates": evaluation.summary()["aggregates"]}

    tuned = {s.label: run(s, tuning, "tune") for s in strategies}
    scored = {name: quality_and_latency(r, quality) for name, r in tuned.items()}

    def within(t: float | None) -> bool:
        return t is not None and (latency_budget is None or t <= latency_budget)

    eligible = {name: (q, t) for name, (q, t) in scored.items() if q is not None and within(t)}
    if not eligible:
        raise ValueError(f"no strategy kept p50 latency within {latency_budget} s on the tuning half: {scored}")
    chosen = max(eligible, key=lambda name: (eligible[name][0], -eligible[name][1]))
    base = next((s for s in strategies if s.label == baseline), Strategy(baseline, "builtin", BUILTIN[baseline]))
    chosen_strategy = next(s for s in strategies if s.label == chosen)
    reported_base = run(base, reporting, "report")
    reported_chosen = run(chosen_strategy, reporting, "report") if chosen != base.label else reported_base
    return {
        "quality": quality, "latency_budget_s": latency_budget, "seed": seed,
        "halves": {"tuning": len(tuning), "reporting": len(reporting)},
        # each quality says over how many questions (and how many failed), as every aggregate does
        "tuning_half": {name: {quality: q, "n": (tuned[name]["aggregates"].get(quality) or {}).get("n", 0),
                               "failed": (tuned[name]["aggregates"].get(quality) or {}).get("failed", 0), "p50_s": t, "within_budget": within(t)}
                        for name, (q, t) in scored.items()},
        "pareto_front": pareto_front(list(tuned.values()), quality),
        "chosen": chosen,
        "report_half": compare(reported_base, reported_chosen),
        "baseline": base.label,
    }
