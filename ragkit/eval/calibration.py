"""Confidence as a calibrated probability: the signals, the logistic model, and how it is scored.

"Correct" means SQuAD token F1 >= 0.5 against the gold answers (official normalisation, citation
marks stripped); a decline is never correct (every calibration question has its answer in the
corpus). The confidence ragkit shows is P(correct | signals) from a logistic regression per model,
fitted by ``bench/calibration.py`` on SQuAD-Shifts new_wiki questions and scored on SQuAD v1.1 dev
questions it never saw; the fitted weights ship in ``ragkit/data/confidence_calibration.json``.

Why hand-written: a 13-feature logistic regression with an L2 penalty is ~20 lines of Newton steps
in numpy; scikit-learn would add a 40 MB dependency for it. ECE and ROC AUC are the standard
definitions (10 equal-width bins; the Mann–Whitney statistic with ties counted half).

Two models per LLM:

* ``answer`` — P(correct), with a ``base`` fit (for configurations without grading or a judge) and
  an ``agentic`` fit (with them). Each is chosen per model by held-out log loss on the calibration
  set (:func:`select_fit`, folds by question) among: every signal on its own configuration's
  answers (the answer's token probabilities, its lexical support in the sources, retrieval scores
  and agreement; for ``agentic`` also the grader's best grade and the judge's support score), the
  six :data:`CORE_SIGNALS` of the answer itself on both configurations' answers, and (``agentic``)
  those six plus grade and support. On ~100 calibration questions the smaller fits won for both
  embedded models: 13-15 signals needed so much shrinkage that the 1.5B's probabilities were
  squeezed to the middle (ECE 0.18 on SQuAD dev before, 0.07-0.11 after);
* ``lacks_answer`` — P(the gold paragraph is not among the sources), from retrieval signals only:
  how sure the system is that the documents lack the answer, shown beside a decline.
"""

from __future__ import annotations

import json
import math
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from haystack import Document

from ragkit.eval.metrics import content_words, lexical_support, normalize_answer, strip_citations

CALIBRATION_FILE = Path(__file__).resolve().parent.parent / "data" / "confidence_calibration.json"
DEFINITION = "correct = SQuAD token F1 >= 0.5 against the gold answers (official normalisation, citations stripped); a decline counts as not correct"
CORRECT_F1 = 0.5
FAILED_STEP_CAP = 0.45  # under ◐: a failed step can only lower confidence

BASE_SIGNALS = (
    "token_p_mean", "token_p_min", "token_p_first", "answer_words", "lexical_support", "verbatim", "question_overlap",
    "dense_top", "dense_margin", "sparse_top", "sparse_margin", "agree_top1", "overlap_top5",
    "evidence_score", "evidence_margin", "evidence_coverage",
)
AGENTIC_SIGNALS = BASE_SIGNALS + ("grade_max", "support")
RETRIEVAL_SIGNALS = ("dense_top", "dense_margin", "sparse_top", "sparse_margin", "agree_top1", "overlap_top5")


def answer_signals(answer: str, question: str, source_texts: Iterable[str]) -> dict[str, float]:
    """What the answer's words say: length, share of content words found in the sources, whether it
    appears verbatim in one of them, and how much of it only repeats the question."""
    text = strip_citations(answer)
    words = content_words(text)
    sources = list(source_texts)
    asked = set(content_words(question))
    normalized = normalize_answer(text)
    return {
        "answer_words": math.log1p(len(text.split())),
        "lexical_support": lexical_support(text, [Document(content=s) for s in sources]) or 0.0,
        "verbatim": float(bool(normalized) and any(normalized in normalize_answer(s) for s in sources)),
        "question_overlap": (sum(w in asked for w in words) / len(words)) if words else 1.0,
    }


def squash(signals: dict[str, float]) -> dict[str, float]:
    """Put unbounded scores on a log scale (BM25 grows with query length)."""
    out = dict(signals)
    for key in ("sparse_top", "sparse_margin"):
        if key in out:
            out[key] = math.copysign(math.log1p(abs(out[key])), out[key])
    return out


# -- the model ----------------------------------------------------------------------------------
def fit_logistic(X: np.ndarray, y: np.ndarray, l2: float = 1.0, iterations: int = 50) -> tuple[np.ndarray, float]:
    """L2-penalised logistic regression by Newton's method on standardised features (intercept not penalised)."""
    n, d = X.shape
    A = np.hstack([X, np.ones((n, 1))])
    w = np.zeros(d + 1)
    penalty = np.full(d + 1, l2)
    penalty[-1] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(A @ w, -30, 30)))
        gradient = A.T @ (p - y) + penalty * w
        hessian = (A * (p * (1 - p))[:, None]).T @ A + np.diag(penalty) + 1e-9 * np.eye(d + 1)
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w[:-1], float(w[-1])


def fit_model(rows: Sequence[dict[str, float]], labels: Sequence[bool], features: Sequence[str], l2: float = 1.0) -> dict[str, Any]:
    """A JSON-ready model: feature names, the standardisation, weights and intercept.
    A missing signal is imputed with its calibration mean (a neutral, standardised 0)."""
    raw = np.array([[squash(r).get(f, np.nan) for f in features] for r in rows], dtype="float64")
    mean = np.nanmean(raw, axis=0)
    mean = np.where(np.isnan(mean), 0.0, mean)
    raw = np.where(np.isnan(raw), mean, raw)
    scale = raw.std(axis=0)
    scale = np.where(scale < 1e-6, 1.0, scale)
    coef, intercept = fit_logistic((raw - mean) / scale, np.asarray(labels, dtype="float64"), l2=l2)
    return {"features": list(features), "mean": mean.round(6).tolist(), "scale": scale.round(6).tolist(), "coef": coef.round(6).tolist(), "intercept": round(intercept, 6), "n": len(rows)}


L2_GRID = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)


def _folds_of(n: int, folds: int, groups: Sequence[str] | None) -> list[int]:
    """Fold of each row: by position, or by a hash of its group (one question's rows stay together)."""
    if groups is None:
        return [i % folds for i in range(n)]
    return [zlib.crc32(str(g).encode("utf-8")) % folds for g in groups]


def fit_model_cv(rows: Sequence[dict[str, float]], labels: Sequence[bool], features: Sequence[str], folds: int = 5, groups: Sequence[str] | None = None) -> dict[str, Any]:
    """:func:`fit_model` with the L2 strength that gives the lowest log loss in ``folds``-fold
    cross-validation on these rows (a few hundred rows and 13-15 signals overfit without it)."""
    fold_of = _folds_of(len(rows), folds, groups)

    def log_loss(l2: float) -> float:
        total = 0.0
        for k in range(folds):
            train = [i for i in range(len(rows)) if fold_of[i] != k]
            model = fit_model([rows[i] for i in train], [labels[i] for i in train], features, l2)
            for i in (i for i in range(len(rows)) if fold_of[i] == k):
                p = min(max(predict(model, rows[i]), 1e-6), 1 - 1e-6)
                total -= math.log(p if labels[i] else 1 - p)
        return total / len(rows)

    losses = {l2: log_loss(l2) for l2 in L2_GRID}
    best = min(losses, key=losses.get)
    return {**fit_model(rows, labels, features, best), "l2": best, "cv_log_loss": round(losses[best], 4)}


# The answer's own evidence: how sure the model was of its tokens, whether its words are in the
# sources, how long it is, how much of it only repeats the question. Six signals instead of 13-15
# need far less shrinkage on ~100 calibration rows; whether a fit uses them or all signals, and
# whether it learns from both configurations' answers, is chosen per model by select_fit.
CORE_SIGNALS = ("token_p_min", "token_p_first", "lexical_support", "verbatim", "answer_words", "question_overlap")
# A grounded span is verbatim and fully in its sources by construction, so two of the core signals say
# nothing about it; what does is how clearly its evidence sentence won (EvidenceSelector's signals).
GROUNDED_SIGNALS = CORE_SIGNALS + ("evidence_score", "evidence_margin", "evidence_coverage")


def select_fit(candidates: dict[str, tuple[Sequence[dict[str, Any]], Sequence[str]]], target: Sequence[dict[str, Any]], folds: int = 5) -> dict[str, Any]:
    """The candidate fit with the lowest held-out log loss on ``target`` rows, then refitted on all of its rows.

    ``candidates``: name -> (training rows, signals); rows are ``bench/calibration.py`` rows (``id``,
    ``signals``, ``correct``). Folds go by question id, so a question's plain and full answers are
    never split between training and testing; every candidate is scored on the same ``target`` rows
    (e.g. full's answers), whatever it trains on. Everything here is calibration data."""
    def held_out_loss(rows: Sequence[dict[str, Any]], features: Sequence[str]) -> float:
        fold_of = {r["id"]: f for r, f in zip(rows, _folds_of(len(rows), folds, [r["id"] for r in rows]))}
        target_fold = _folds_of(len(target), folds, [r["id"] for r in target])
        total = 0.0
        for k in range(folds):
            train = [r for r in rows if fold_of[r["id"]] != k]
            model = fit_model_cv([r["signals"] for r in train], [bool(r["correct"]) for r in train], features, folds, [r["id"] for r in train])
            for r, f in zip(target, target_fold):
                if f == k:
                    p = min(max(predict(model, r["signals"]), 1e-6), 1 - 1e-6)
                    total -= math.log(p if r["correct"] else 1 - p)
        return total / len(target)

    losses = {name: round(held_out_loss(rows, features), 4) for name, (rows, features) in candidates.items()}
    best = min(losses, key=losses.get)
    rows, features = candidates[best]
    model = fit_model_cv([r["signals"] for r in rows], [bool(r["correct"]) for r in rows], features, folds, [r["id"] for r in rows])
    return {**model, "selected": best, "candidates_log_loss": losses}


def predict(model: dict[str, Any], signals: dict[str, float]) -> float:
    squashed = squash(signals)
    z = model["intercept"]
    for name, mean, scale, coef in zip(model["features"], model["mean"], model["scale"], model["coef"]):
        value = squashed.get(name)
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            z += coef * (float(value) - mean) / scale
    return float(1.0 / (1.0 + math.exp(-max(min(z, 30.0), -30.0))))


def calibrated_confidence(models: dict[str, Any], values: dict[str, float], answered: bool, failed: bool) -> tuple[float, str | None]:
    """(P(correct), which fit gave it) under the rules above; the benchmark rescoring uses this too."""
    agentic = "grade_max" in values or "support" in values
    fit_name = "agentic" if agentic else "base"
    fit = (models.get("answer") or {}).get(fit_name)
    if not answered:
        confidence = 0.0  # a decline claims nothing that can be right; p_lacks_answer says how sure it is
    elif fit:
        confidence = predict(fit, values)
    else:  # no calibration shipped at all: never claim more than ○
        confidence = min(values.get("lexical_support", 0.0), FAILED_STEP_CAP)
    if failed:
        confidence = min(confidence, FAILED_STEP_CAP)
    return min(max(confidence, 0.0), 1.0), (fit_name if fit else None)


def rescore_row(row: dict[str, Any], models: dict[str, Any], floor: float = 0.0) -> tuple[float, bool]:
    """(confidence, correct) for a row collected by ``bench/calibration.py``, as the pipeline would
    show it under ``models``: the same :func:`calibrated_confidence`, and a floor decline is 0 and wrong."""
    answered = not row["declined"] and bool(row["signals"])
    confidence, _ = calibrated_confidence(models, row["signals"], answered=answered, failed=bool(row["failed_steps"]))
    if answered and confidence < floor:
        return 0.0, False
    return confidence, bool(row["correct"]) and answered


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# -- scoring ------------------------------------------------------------------------------------
def expected_calibration_error(confidences: Sequence[float], correct: Sequence[bool], bins: int = 10) -> float:
    """Sum over 10 equal-width bins of (share of answers in the bin) × |mean confidence − share correct|."""
    c = np.asarray(confidences, dtype="float64")
    y = np.asarray(correct, dtype="float64")
    if not c.size:
        return float("nan")
    which = np.minimum((c * bins).astype(int), bins - 1)
    return float(sum(abs(c[which == b].mean() - y[which == b].mean()) * (which == b).sum() for b in range(bins) if (which == b).any()) / c.size)


def roc_auc(confidences: Sequence[float], correct: Sequence[bool]) -> float:
    """P(a correct answer's confidence > a wrong one's), ties counted half (NaN with one class only)."""
    pos = [c for c, y in zip(confidences, correct) if y]
    neg = [c for c, y in zip(confidences, correct) if not y]
    if not pos or not neg:
        return float("nan")
    neg_sorted = np.sort(np.asarray(neg))
    wins = sum(np.searchsorted(neg_sorted, p, "left") + 0.5 * (np.searchsorted(neg_sorted, p, "right") - np.searchsorted(neg_sorted, p, "left")) for p in pos)
    return float(wins / (len(pos) * len(neg)))


def reliability_bins(confidences: Sequence[float], correct: Sequence[bool], bins: int = 10) -> list[dict[str, float]]:
    """Per equal-width bin: its range, how many answers, their mean confidence and share correct."""
    out = []
    for b in range(bins):
        low, high = b / bins, (b + 1) / bins
        inside = [(c, y) for c, y in zip(confidences, correct) if low <= c < high or (b == bins - 1 and c == 1.0)]
        out.append({"low": low, "high": high, "n": len(inside), "confidence": float(np.mean([c for c, _ in inside])) if inside else None, "correct": float(np.mean([y for _, y in inside])) if inside else None})
    return out


def score(confidences: Sequence[float], correct: Sequence[bool], high: float = 0.7) -> dict[str, Any]:
    """The figures calibration.json reports for one configuration."""
    high_rows = [y for c, y in zip(confidences, correct) if c > high]
    return {
        "n": len(confidences),
        "ece": round(expected_calibration_error(confidences, correct), 4),
        "auc": round(roc_auc(confidences, correct), 4),
        "high_share_correct": round(float(np.mean(high_rows)), 4) if high_rows else None,
        "high_n": len(high_rows),
        "mean_confidence": round(float(np.mean(confidences)), 4) if confidences else None,
        "share_correct": round(float(np.mean(correct)), 4) if correct else None,
    }


# -- the shipped calibration -------------------------------------------------------------------
@lru_cache(maxsize=4)
def _load(path: str) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def shipped_calibration(path: str | Path = CALIBRATION_FILE) -> dict[str, Any]:
    """The calibration that ships with ragkit ({} when the file is missing: confidence then says it is uncalibrated)."""
    try:
        return _load(str(path))
    except (OSError, json.JSONDecodeError):
        return {}


def model_calibration(llm: str | None, calibration: dict[str, Any] | None = None) -> tuple[str | None, dict[str, Any] | None]:
    """(name, models) calibrated for ``llm``: its own, else the same family's by size, else none.

    A local GGUF path or a served model with a known name in it (``…qwen2.5-coder-1.5b…``) uses that
    model's fit; an unknown model borrows the first shipped one, and says so."""
    models = (calibration if calibration is not None else shipped_calibration()).get("models", {})
    if not models:
        return None, None
    if llm in models:
        return llm, models[llm]
    lowered = str(llm or "").lower()
    for name in sorted(models, key=len, reverse=True):
        if name in lowered:
            return name, models[name]
    first = next(iter(models))
    return f"{first} (borrowed: no calibration for {llm})", models[first]


def scored_rows_path(results_dir: str | Path, summary: dict, model: str) -> Path:
    """Where ``calibration.json``'s scored rows for ``model`` live: the model entry's ``scored_rows``,
    else the report's (a pattern with ``{model}``), relative to ``results_dir``; results from before
    either kept them in ``calibration_rows``."""
    pattern = (summary.get("models", {}).get(model, {}).get("scored_rows") or summary.get("scored_rows")
               or f"calibration_rows/{summary.get('scored_set', 'squad_dev')}.{{model}}.jsonl")
    return Path(results_dir) / pattern.format(model=model)


def committed_pairs(results_dir: str | Path, model: str, configs: Sequence[str] = ("plain", "full")) -> dict[str, list[tuple[float, bool]]]:
    """{config: [(confidence, correct), ...]} for a model's scored rows under ``bench/results`` (what the
    README's reliability diagram and notebook 06 draw), rescored with the shipped calibration."""
    results_dir = Path(results_dir)
    summary = json.loads((results_dir / "calibration.json").read_text(encoding="utf-8"))
    models = shipped_calibration()["models"][model]
    rows = read_rows(scored_rows_path(results_dir, summary, model))
    floors = {"full": summary.get("full_floor", 0.0)}
    return {c: [rescore_row(r, models, floors.get(c, 0.0)) for r in rows if r["config"] == c] for c in configs}
