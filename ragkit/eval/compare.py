"""Compare runs with statistics: a paired bootstrap interval per measure, McNemar's exact test for right/wrong.

Two runs of the same test set answer the same questions, so they are compared question by question:

* for every measure both runs have on a question, the difference of the means with a **paired
  bootstrap 95% interval** (the questions resampled with replacement, 10,000 times, seeded), and in
  words: "no significant difference" when the interval covers 0;
* for the right/wrong outcome (``correct``), **McNemar's exact test**: of the questions on which the
  runs disagree, how many each got right, and the two-sided binomial p-value of that split
  (``scipy.stats.binomtest``);
* the questions that flipped (right in one, wrong in the other), with both answers, for a person to read.

:func:`pareto_front` names the runs no other run beats on both quality and latency. The paired bootstrap is
written here (a few lines of numpy): scipy's ``bootstrap`` resamples each sample on its own unless told
the pairing, and takes minutes for 10,000 resamples of a few hundred rows where this takes milliseconds.

Usage::

    table = compare(load_run("runs/plain"), load_run("runs/grading"))
    print(markdown_report([run_a, run_b]))
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
from scipy.stats import binomtest

from ragkit.eval.scoring import JUDGE
from ragkit.eval.strategies import run_label
from ragkit.eval.testset import GENERATED_KINDS

MEASURES = ("recall@k", "mrr", "ndcg", "em", "f1", "semantic_similarity", "correct", "faithfulness", "context_relevance",
            "correct_decline", "false_decline", "seconds", "llm_calls")
LOWER_IS_BETTER = {"seconds", "llm_calls", "false_decline"}
BOOTSTRAP_SAMPLES = 10_000


def paired_bootstrap(a: list[float], b: list[float], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> tuple[float, float, float]:
    """(mean of b - a, low, high): the 95% interval of the mean paired difference."""
    diffs = np.asarray(b, dtype="float64") - np.asarray(a, dtype="float64")
    means = diffs[np.random.default_rng(seed).integers(0, len(diffs), size=(samples, len(diffs)))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(diffs.mean()), float(low), float(high)


def mcnemar_exact(a_right: list[bool], b_right: list[bool]) -> dict[str, Any]:
    """McNemar's exact test: of the discordant questions, ``b_only`` right only in b, ``a_only`` only in a;
    the two-sided binomial p-value of that split under "no difference" (p = 1/2)."""
    a_only = sum(1 for x, y in zip(a_right, b_right) if x and not y)
    b_only = sum(1 for x, y in zip(a_right, b_right) if y and not x)
    if a_only + b_only == 0:
        return {"a_only": 0, "b_only": 0, "p_value": 1.0}
    return {"a_only": a_only, "b_only": b_only, "p_value": float(binomtest(b_only, a_only + b_only, 0.5).pvalue)}


def row_value(row: dict[str, Any], measure: str) -> float | None:
    """A row's value of ``measure`` as runs are compared. LLM calls count the replies the LLM cache served too, as the
    row's seconds count the time those replies took when they were made: a strategy is compared by what it asks the
    LLM, not by what an earlier run happened to leave in the cache (a rerun makes no call at all)."""
    value = row.get(measure)
    if value is None:
        return None
    return float(value) + float(row.get("cache_hits") or 0) if measure == "llm_calls" else float(value)


def calls_per_question(aggregates: dict[str, Any]) -> float | None:
    """The LLM calls a question asked, made or served by the cache (:func:`row_value`), on average."""
    made = (aggregates.get("llm_calls") or {}).get("mean")
    return None if made is None else round(made + ((aggregates.get("cache_hits") or {}).get("mean") or 0.0), 4)


def cached_share(aggregates: dict[str, Any]) -> float | None:
    """How many of those calls the LLM cache answered, as a share (None without calls)."""
    calls = calls_per_question(aggregates)
    return None if not calls else round(((aggregates.get("cache_hits") or {}).get("mean") or 0.0) / calls, 4)


def compare(run_a: dict[str, Any], run_b: dict[str, Any]) -> dict[str, Any]:
    """Per measure: n (questions both runs measured), both means, the difference and its interval, a verdict."""
    a_rows, b_rows = {r["id"]: r for r in run_a["rows"]}, {r["id"]: r for r in run_b["rows"]}
    common = [i for i in a_rows if i in b_rows]
    out: dict[str, Any] = {"questions_in_both": len(common), "measures": {}}
    judges = [run["run"].get("judge_model") for run in (run_a, run_b)]
    if None not in judges and judges[0] != judges[1]:
        # another judge model or task reads on another scale (P(yes) against P(yes) x likelihood): no difference to report
        out["judges_differ"] = judges
    for measure in MEASURES:
        if measure in JUDGE and "judges_differ" in out:  # read by the run's judge: compared only between runs judged alike
            continue
        pairs = [(a, b) for i in common if (a := row_value(a_rows[i], measure)) is not None and (b := row_value(b_rows[i], measure)) is not None]
        if len(pairs) < 2:
            continue
        diff, low, high = paired_bootstrap([p[0] for p in pairs], [p[1] for p in pairs])
        better = (diff < 0) if measure in LOWER_IS_BETTER else (diff > 0)
        verdict = "no significant difference" if low <= 0 <= high else (f"B {'better' if better else 'worse'}")
        entry = {"n": len(pairs), "a": round(statistics.fmean(p[0] for p in pairs), 4), "b": round(statistics.fmean(p[1] for p in pairs), 4),
                 "difference": round(diff, 4), "interval_95": [round(low, 4), round(high, 4)], "verdict": verdict}
        if measure == "correct":
            test = mcnemar_exact([p[0] >= 0.5 for p in pairs], [p[1] >= 0.5 for p in pairs])
            entry["mcnemar"] = {**test, "p_value": round(test["p_value"], 4)}
            if test["p_value"] >= 0.05:
                entry["verdict"] = "no significant difference"
        out["measures"][measure] = entry
    out["flipped"] = [
        {"id": i, "question": a_rows[i]["question"], "gold": a_rows[i].get("gold"), "a": a_rows[i]["answer"], "b": b_rows[i]["answer"],
         "a_correct": a_rows[i]["correct"], "b_correct": b_rows[i]["correct"], "a_sources": a_rows[i].get("sources"), "b_sources": b_rows[i].get("sources")}
        for i in common if a_rows[i].get("correct") is not None and b_rows[i].get("correct") is not None
        and (a_rows[i]["correct"] >= 0.5) != (b_rows[i]["correct"] >= 0.5)
    ]
    return out


def label(run: dict[str, Any]) -> str:
    strategy = run["run"]["strategy"]
    return run_label(strategy["name"], strategy["version"])


def quality_and_latency(run: dict[str, Any], quality: str = "correct") -> tuple[float | None, float | None]:
    agg = run["aggregates"]
    return (agg.get(quality) or {}).get("mean"), (agg.get("latency_s") or {}).get("p50")


def pareto_front(runs: list[dict[str, Any]], quality: str = "correct") -> list[str]:
    """The runs no other run beats on both ``quality`` (higher) and p50 latency (lower)."""
    points = {label(r): quality_and_latency(r, quality) for r in runs}
    points = {k: v for k, v in points.items() if None not in v}
    return [k for k, (q, t) in points.items()
            if not any((q2 >= q and t2 <= t) and (q2 > q or t2 < t) for k2, (q2, t2) in points.items() if k2 != k)]


def cell_text(value: Any) -> str:
    return "–" if value is None else (f"{value:.3f}" if isinstance(value, float) else str(value))


def run_names(runs: list[dict[str, Any]]) -> list[str]:
    """Each run's label; the same strategy twice is numbered, so each keeps a column of its own."""
    names = [label(run) for run in runs]
    return [n if names.count(n) == 1 else f"{n} ({i + 1})" for i, n in enumerate(names)]


def measure_cell(aggregates: dict[str, Any], measure: str) -> str | None:
    """'0.500 (n=6, 1 failed)': a mean with what it was computed over, None when the run has no value."""
    entry = aggregates.get(measure)
    if not entry or entry["mean"] is None:
        return None
    failed = f", {entry['failed']} failed" if entry.get("failed") else ""
    return f"{entry['mean']:.3f} (n={entry['n']}{failed})"


def aggregate_rows(runs: list[dict[str, Any]], measures: tuple[str, ...] = MEASURES[:-2]) -> list[dict[str, Any]]:
    """The runs' aggregates a measure a row and a run a column (runs compared are few, measures many):
    items, each measure some run has, then p50 / p95 seconds and LLM calls a question (numbers, unformatted)."""
    names = run_names(runs)
    rows = [{"measure": "items", **{n: r["aggregates"]["rows"] for n, r in zip(names, runs)}}]
    for measure in measures:
        cells = {n: measure_cell(r["aggregates"], measure) for n, r in zip(names, runs)}
        if any(cells.values()):
            rows.append({"measure": measure, **cells})
    for measure, key, stat in (("p50 s", "latency_s", "p50"), ("p95 s", "latency_s", "p95")):
        rows.append({"measure": measure, **{n: (r["aggregates"].get(key) or {}).get(stat) for n, r in zip(names, runs)}})
    rows.append({"measure": "LLM calls/q", **{n: calls_per_question(r["aggregates"]) for n, r in zip(names, runs)}})
    if any(cached_share(r["aggregates"]) for r in runs):  # say how much of a run the cache answered (its seconds are replayed)
        rows.append({"measure": "share from LLM cache", **{n: cached_share(r["aggregates"]) for n, r in zip(names, runs)}})
    return rows


def comparison_rows(result: dict[str, Any], names: tuple[str, str]) -> list[dict[str, str]]:
    """:func:`compare`'s measures as text cells: both means, the difference, its interval, the verdict (with McNemar's test)."""
    if names[0] == names[1]:  # one strategy run twice: each mean keeps its own column
        names = (f"{names[0]} (A)", f"{names[1]} (B)")
    rows = []
    for measure, e in result["measures"].items():
        test = f"; McNemar {e['mcnemar']['b_only']} vs {e['mcnemar']['a_only']}, p = {e['mcnemar']['p_value']:.3f}" if "mcnemar" in e else ""
        rows.append({"measure": measure, "n": str(e["n"]), names[0]: f"{e['a']:.3f}", names[1]: f"{e['b']:.3f}", "difference": f"{e['difference']:+.3f}",
                     "95% interval": f"[{e['interval_95'][0]:+.3f}, {e['interval_95'][1]:+.3f}]", "verdict": e["verdict"] + test})
    return rows


def flipped_text(result: dict[str, Any]) -> str:
    n = len(result["flipped"])
    return f"{n} question{'' if n == 1 else 's'} flipped between right and wrong"


JUDGED_SCORES_NOTE = ("Faithfulness and context relevance are the judge's scores: they rank answers (higher: more often right) "
                      "but are not probabilities of being right.")


# Measured (docs/evaluation.md): bench/results/eval_agreement.json's six generated sets, bench/results/rerank_by_kind.json (the
# same runs by kind of item) and bench/results/rerank_questions.json (every question of the 300 paragraphs those sets were
# written from); tests hold these figures to the JSON.
GENERATED_SET_RERANK_NOTE = (
    "This test set was written by an LLM from single sentences, and such sets favour the sentence-level reranker: on SQuAD dev "
    "and new_wiki, four of six generated sets ranked rerank above plain retrieval, and all six did on their paraphrase items, "
    "while people's questions about the same paragraphs ranked it below (MRR@5 -0.028 and -0.012 over 1,564 and 1,566 "
    "questions). Check its verdict on a few questions of your own (ragkit agreement; docs/evaluation.md).")


def judged_scores_note(runs: list[dict[str, Any]]) -> str | None:
    """The sentence a report says under the runs' measures when a judge scored them (a mean of 0.4 reads as "wrong" otherwise)."""
    return JUDGED_SCORES_NOTE if any(measure_cell(r["aggregates"], m) for r in runs for m in JUDGE) else None


def generated_set_note(runs: list[dict[str, Any]]) -> str | None:
    """The caveat a report gives when a generated test set is what decides between the embedded reranker on and off: the
    one verdict such sets measurably get wrong. None for a set of the user's own or SQuAD's questions."""
    def bi_encoder_rerank(run: dict[str, Any]) -> bool:
        features = ((run.get("run") or {}).get("strategy") or {}).get("features") or {}
        return bool(features.get("rerank")) and features.get("rerank_backend", "bi-encoder") == "bi-encoder"

    kinds = {row.get("kind") for run in runs for row in run.get("rows", [])}
    compared = {bi_encoder_rerank(run) for run in runs}
    return GENERATED_SET_RERANK_NOTE if compared == {True, False} and kinds and kinds <= set(GENERATED_KINDS) else None


def report_notes(runs: list[dict[str, Any]]) -> list[str]:
    """Every sentence a report says under the runs' measures, in the order it says them."""
    return [note for note in (judged_scores_note(runs), generated_set_note(runs)) if note]


def not_compared_note(result: dict[str, Any]) -> str | None:
    """What :func:`compare` left out and why, for a report to say under its table (None when nothing)."""
    if judges := result.get("judges_differ"):
        return f"faithfulness and context relevance not compared: judged by {judges[0]} and by {judges[1]}"
    return None


def markdown_report(runs: list[dict[str, Any]], quality: str = "correct") -> str:
    """Each run's aggregates, then every later run against the first, measure by measure, with the interval."""
    names = run_names(runs)
    lines = [f"# ragkit report: {', '.join(names)}", "", f"Test set: `{runs[0]['run']['testset']['path']}` "
             f"(sha256 {runs[0]['run']['testset']['sha256'][:12]}…); model {runs[0]['run']['model']}.", "",
             "| run | items | " + " | ".join(MEASURES[:-2]) + " | p50 s | p95 s | LLM calls/q | share from LLM cache |",
             "|" + " --- |" * (len(MEASURES) + 4)]
    for name, run in zip(names, runs):
        agg = run["aggregates"]
        cells = [measure_cell(agg, m) or "–" for m in MEASURES[:-2]]
        latency = agg.get("latency_s") or {}
        lines.append(f"| {name} | {agg['rows']} | " + " | ".join(cells) + f" | {cell_text(latency.get('p50'))} | {cell_text(latency.get('p95'))} | "
                     f"{cell_text(calls_per_question(agg))} | {cell_text(cached_share(agg))} |")
    for note in report_notes(runs):
        lines += ["", note]
    front = pareto_front(runs, quality)
    lines += ["", f"Pareto front ({quality} vs p50 latency): {', '.join(front) or '–'}."]
    for name, run in zip(names[1:], runs[1:]):
        result = compare(runs[0], run)
        lines += ["", f"## {name} vs {names[0]} ({result['questions_in_both']} questions in both)", "",
                  "| measure | n | " + names[0] + " | " + name + " | difference | 95% interval | verdict |", "|" + " --- |" * 7]
        lines += ["| " + " | ".join(row.values()) + " |" for row in comparison_rows(result, (names[0], name))]
        if note := not_compared_note(result):
            lines.append(f"\n{note}.")
        lines.append(f"\n{flipped_text(result)}.")
    return "\n".join(lines) + "\n"
