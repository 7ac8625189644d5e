"""Choose a strategy on one half of a test set and report it on the other, so the choice cannot fool itself.

The items are split in two halves by their ids (seeded, so the split is the same every time; each kind
split evenly). Every candidate strategy runs on the **tuning half**; the one with the best quality
(``correct`` by default) whose p50 latency is within the budget is chosen, ties going to the faster.
The chosen strategy and the baseline (``plain``) then run on the **reporting half**, and that comparison
— the difference with its paired bootstrap interval (:mod:`ragkit.eval.compare`) — is the figure to
believe: the tuning half's own numbers are biased upward by the choice itself. The quality-vs-latency
Pareto front of the tuning half is named too.

The candidates are a list of strategies (the built-in ones by default), tried one by one, or a search
space — a few features and the values each may take (:data:`TOGGLES`: every on/off combination of four
toggles, 16; :data:`WIDE`: six toggles, the retriever and ``top_k``, 576). A space no larger than
``trials`` is tried whole; a larger one is searched by Optuna's TPE sampler for ``trials`` trials
(seeded; a strategy over the latency budget is infeasible to it, a constraint it models), since
576 runs of even 20 questions are days on 2 cores. Optuna is used rather than a hand-written search
because its sampler models which values pay off, and it keeps the study in memory (nothing pickled or
written). A trial that repeats a strategy already run costs nothing: its run folder is reused. Each run
is an ordinary, resumable run folder, so a stopped tuning goes on where it stopped.

Usage::

    report = tune(make_rag, items, strategies, latency_budget=3.0, runs_dir="runs/tune", testset_path="set.jsonl", config=config)
    report = tune(make_rag, items, WIDE, latency_budget=3.0, ..., trials=24)   # Optuna over 576 combinations
    report["chosen"], report["report_half"]["measures"]["correct"]
"""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from ragkit.config import RagConfig
from ragkit.eval.compare import compare, pareto_front, quality_and_latency
from ragkit.eval.judge import calls_per_answer
from ragkit.eval.runs import EvalRun, askable, duration_text, estimated_calls, estimated_seconds
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


SearchSpace = dict[str, tuple[Any, ...]]
TOGGLES: SearchSpace = {name: (False, True) for name in ("hyde", "rerank", "grading", "routing")}
WIDE: SearchSpace = {**TOGGLES, "decompose": (False, True), "self_correction": (False, True),
                     "retrieval_mode": ("hybrid", "dense", "sparse"), "top_k": (3, 5, 8)}
# a toggle that needs others on to do anything: self-correction acts on the hallucination check's verdict
TURNS_ON = {"self_correction": {"hallucination_check": True, "judge_spans": True, "self_correction": True}}


def space_size(space: SearchSpace) -> int:
    return math.prod(len(values) for values in space.values())


def space_strategy(values: dict[str, Any]) -> Strategy:
    """The strategy for one point of a search space, named by what it changes from plain RAG ("hyde+top_k=3")."""
    default, settings, changed = Features(), {}, []
    for name, value in values.items():
        settings.update(TURNS_ON[name] if value is True and name in TURNS_ON else {name: value})
        if value != getattr(default, name):
            changed.append(name if value is True else f"{name}={value}")
    return Strategy("+".join(changed) or "plain", "builtin", replace(default, **settings).validate())


def space_strategies(space: SearchSpace) -> list[Strategy]:
    """Every point of ``space``, plain RAG first."""
    return [space_strategy(dict(zip(space, values))) for values in itertools.product(*space.values())]


def builtin_space(names: list[str] | None = None) -> list[Strategy]:
    return [Strategy(n, "builtin", BUILTIN[n]) for n in (names or list(BUILTIN))]


def tune(
    make_rag: Callable[[Features], Any], items: list[EvalItem], strategies: list[Strategy] | SearchSpace, latency_budget: float | None,
    runs_dir: str | Path, testset_path: str | Path, config: RagConfig, judge: Any = None, cache: Any = None, quality: str = "correct",
    seed: int = 0, baseline: str = "plain", known_chunks: set[str] | None = None, progress: Callable[[str, int, int], None] | None = None,
    trials: int = 24,
) -> dict[str, Any]:
    """``strategies``: a list, each run; or a search space, run whole if it has at most ``trials`` points and
    searched by Optuna otherwise. ``progress(what, done, total)`` hears each run start ("tune half: plain") and
    each question it finishes."""
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

    def within(t: float | None) -> bool:
        return t is not None and (latency_budget is None or t <= latency_budget)

    tuned: dict[str, dict[str, Any]] = {}
    tried: dict[str, Strategy] = {}

    def tried_on_tuning_half(strategy: Strategy) -> tuple[float | None, float | None]:
        if strategy.label not in tuned:  # a repeated trial reuses the run
            tuned[strategy.label], tried[strategy.label] = run(strategy, tuning, "tune"), strategy
        return quality_and_latency(tuned[strategy.label], quality)

    if isinstance(strategies, dict) and space_size(strategies) > trials:
        search = {"method": "optuna TPE", "space_size": space_size(strategies), "trials": trials, "seed": seed}
        _optuna_search(strategies, trials, seed, tried_on_tuning_half, within, latency_budget)
    else:
        candidates = space_strategies(strategies) if isinstance(strategies, dict) else strategies
        search = {"method": "exhaustive", "space_size": len(candidates), "trials": len(candidates), "seed": seed}
        for strategy in candidates:
            tried_on_tuning_half(strategy)
    search["strategies_run"] = len(tuned)
    scored = {name: quality_and_latency(r, quality) for name, r in tuned.items()}

    eligible = {name: (q, t) for name, (q, t) in scored.items() if q is not None and within(t)}
    if not eligible:
        raise ValueError(f"no strategy kept p50 latency within {latency_budget} s on the tuning half: {scored}")
    chosen = max(eligible, key=lambda name: (eligible[name][0], -eligible[name][1]))

    def tuning_entry(name: str, q: float | None, t: float | None) -> dict[str, Any]:
        measured = tuned[name]["aggregates"].get(quality) or {}  # each quality says over how many questions, as every aggregate does
        return {quality: q, "n": measured.get("n", 0), "failed": measured.get("failed", 0), "p50_s": t, "within_budget": within(t)}
    base = tried.get(baseline, Strategy(baseline, "builtin", BUILTIN[baseline]))
    chosen_strategy = tried[chosen]
    reported_base = run(base, reporting, "report")
    reported_chosen = run(chosen_strategy, reporting, "report") if chosen != base.label else reported_base
    return {
        "quality": quality, "latency_budget_s": latency_budget, "seed": seed, "search": search,
        "halves": {"tuning": len(tuning), "reporting": len(reporting)},
        "tuning_half": {name: tuning_entry(name, q, t) for name, (q, t) in scored.items()},
        "pareto_front": pareto_front(list(tuned.values()), quality),
        "chosen": chosen,
        "report_half": compare(reported_base, reported_chosen),
        "baseline": base.label,
    }


def _optuna_search(space: SearchSpace, trials: int, seed: int, evaluate: Callable[[Strategy], tuple[float | None, float | None]],
                   within: Callable[[float | None], bool], latency_budget: float | None) -> None:
    """``trials`` trials of Optuna's TPE sampler over ``space``, each a strategy run on the tuning half by
    ``evaluate``; a strategy over the latency budget (or with no latency: every question failed) is infeasible."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # a line a trial would scroll the progress bars away

    def objective(trial: optuna.Trial) -> float:
        quality, seconds = evaluate(space_strategy({name: trial.suggest_categorical(name, list(values)) for name, values in space.items()}))
        over = 1.0 if seconds is None else (0.0 if within(seconds) else seconds - latency_budget)
        trial.set_constraint("seconds_over_budget", over)  # > 0: infeasible, whatever its quality
        return quality if quality is not None else 0.0

    optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed)).optimize(objective, n_trials=trials)


def tune_plan(strategies: list[Strategy] | SearchSpace, items: list[EvalItem], model: str, judge: str | None = None,
              known_chunks: set[str] | None = None, trials: int = 24, seed: int = 0, baseline: str = "plain") -> dict[str, Any]:
    """What :func:`tune` would ask, before it asks anything (``ragkit tune --dry-run``): the runs on each half, the
    LLM calls (the judge's, given its run label, included) and roughly how long, as if from scratch — a resumed
    tuning reuses its finished rows. The chosen strategy is not known until the tuning half has run, so the
    reporting half counts the baseline and the mean candidate; an Optuna search counts ``trials`` strategies of
    its space's mean cost (a repeated trial costs nothing, so that is the most it asks)."""
    tuning, reporting = (askable(half, known_chunks) for half in split_halves(items, seed))
    searched = isinstance(strategies, dict) and space_size(strategies) > trials
    candidates = space_strategies(strategies) if isinstance(strategies, dict) else strategies

    def calls(strategy: Strategy, half: list[EvalItem]) -> int:
        return sum(estimated_calls(strategy, it) for it in half)

    runs = trials if searched else len(candidates)
    tuning_calls = (round(trials * sum(calls(s, tuning) for s in candidates) / len(candidates)) if searched
                    else sum(calls(s, tuning) for s in candidates))
    base = Strategy(baseline, "builtin", BUILTIN[baseline])
    reporting_calls = calls(base, reporting) + round(sum(calls(s, reporting) for s in candidates) / len(candidates))
    judge_calls = calls_per_answer(judge) * (runs * len(tuning) + 2 * len(reporting))
    return {"method": "optuna TPE" if searched else "exhaustive", "space_size": len(candidates), "strategies": runs,
            "tuning_questions": len(tuning), "reporting_questions": len(reporting), "llm_calls": tuning_calls + reporting_calls + judge_calls,
            "seconds": estimated_seconds(model, judge, tuning_calls + reporting_calls, judge_calls)}


def plan_text(plan: dict[str, Any]) -> str:
    runs = (f"at most {plan['strategies']} strategies (Optuna's TPE over {plan['space_size']} combinations)" if plan["method"] != "exhaustive"
            else f"{plan['strategies']} strategies")
    return (f"{runs} on the tuning half's {plan['tuning_questions']} questions, then the baseline and the chosen one on the "
            f"reporting half's {plan['reporting_questions']}: about {plan['llm_calls']} LLM calls, roughly {duration_text(plan['seconds'])} on 2 cores "
            "(as if from scratch: finished rows in the runs folder are reused)")
