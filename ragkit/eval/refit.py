"""Confidence refitted on the user's own kind of text: ``ragkit calibrate --testset set.jsonl``.

The shipped confidence is a logistic model per LLM fitted on Wikipedia-style questions
(:mod:`ragkit.eval.calibration`). On other text — forum posts, product reviews — the same signals can
mean something else, and the probability drifts (held-out forum text: mean confidence 0.52 against 36 %
right). This module refits it on the user's generated test set:

* :func:`collect_rows` asks every answerable item with the user's engine and keeps, per item, the
  signals the confidence read, whether the answer is correct (SQuAD token F1 ≥ 0.5 against the test
  set's answer — :data:`ragkit.eval.calibration.DEFINITION`, a decline never correct) and the chunk it
  was written from (its fold group);
* :func:`refit` **recalibrates** the shipped fit (the one the engine uses for these features: ``base`` or
  ``agentic``): P = sigmoid(slope · logit(shipped P) + shift), two numbers learned on the user's rows
  (Platt scaling). The shipped fit learned *which* signals mark a right answer from hundreds of labelled
  questions; a user's test set of ~100 generated questions is enough to say how far its probabilities
  sit off on their text, not to relearn 9 weights — refitting every weight there lost ranking on
  held-out new_wiki (ROC AUC 0.70 → 0.59), recalibrating keeps the shipped ranking (a positive slope
  orders answers as before). Folds are grouped by chunk, so an item's paraphrases never sit on both
  sides; "after"'s ECE and reliability bins are **out-of-fold** (on items the fit never saw), its ROC AUC
  the saved fit's own (recalibrating leaves the order of answers as it was); "before" is the shipped fit
  on the same items. A model with no shipped fit gets every weight fitted (``method="refit"``);
* generated questions are easier than people's (each is written from the one sentence that holds its
  answer): on SQuAD dev 70 % of them were answered right against 52 % of people's questions of the same
  paragraphs, and a fit learned on them alone claims too much on real ones. So the refit moves its
  intercept by a **generated-question offset**, a logit shift measured per model where both kinds of question exist
  for the same paragraphs (SQuAD dev: ``bench/calibration_refit.py offset`` →
  ``ragkit/data/generated_question_offset.json``), scaled by the share of the user's rows that were
  generated (labelled questions need none). :func:`difficulty_offset` is that measurement, and
  :func:`offset_interval` how far it could move on another sample of the same size (a bootstrap over paragraphs);
* :func:`save_beside_index` keeps the result as ``confidence_calibration.json`` in the index folder
  (written atomically), where :func:`calibration_beside_index` finds it; the engine then uses it for
  that index, and the shipped fit stays the default everywhere else. Deleting the file goes back.

Hand-written: the two-parameter Platt fit is a few lines of Newton's method on top of
:mod:`ragkit.eval.calibration` (where the full logistic fit lives); no library fits in the shipped fit's JSON format.

Usage::

    rows = collect_rows(rag, items)
    outcome = refit(rows, model="qwen2.5-coder-0.5b", agentic=False)  # recalibrated, out-of-fold scores
    outcome["before"]["ece"], outcome["after"]["ece"]
    save_beside_index(index_dir, outcome["calibration"])
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Sequence

from ragkit.eval.calibration import (
    AGENTIC_SIGNALS, CORRECT_F1, CORE_SIGNALS, DEFINITION, GROUNDED_SIGNALS, _folds_of, calibrated_confidence, fit_model_cv,
    model_calibration, predict, reliability_bins, score,
)
from ragkit.eval.metrics import f1_score

CALIBRATION_NAME = "confidence_calibration.json"
MIN_ROWS = 30  # fewer answered items than this: too few to fit, said so
OFFSET_FILE = Path(__file__).resolve().parents[1] / "data" / "generated_question_offset.json"
PLATT_PRIOR = 1.0  # ridge pulling (slope, shift) toward (1, 0), the shipped fit: keeps ~30 rows or separable labels finite
MIN_SLOPE = 0.05  # never flip or flatten the shipped ranking
GENERATED_KINDS = ("single", "paraphrase", "multi")  # written by ragkit testset generate; "labelled"/"squad" are people's


class TooFewItemsError(ValueError):
    """The test set gave too few answered items to fit a calibration on."""


def collect_rows(rag: Any, items: Sequence[Any], progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """One row per answerable item: signals, correct, declined, failed steps, its fold group."""
    from ragkit.llm.generators import reset_prompt_cache

    rows = []
    asked = [item for item in items if item.answerable and item.answers]
    for i, item in enumerate(asked):
        reset_prompt_cache(getattr(rag, "chat_generator", None))  # each item from a cold cache: the same answer wherever it sits
        result = rag.ask(item.question)
        f1 = 0.0 if result.declined else f1_score(result.answer, item.answers)
        rows.append({
            "id": item.id, "group": (item.chunks or [item.source or item.id])[0], "question": item.question, "answer": result.answer,
            "generated": item.kind in GENERATED_KINDS,
            "declined": bool(result.declined), "f1": round(f1, 4), "correct": f1 >= CORRECT_F1 and not result.declined,
            "signals": {k: v for k, v in (result.details.get("confidence") or {}).items() if k in AGENTIC_SIGNALS},
            "failed_steps": list(result.failed_steps), "confidence_at_run": result.confidence,
        })
        if progress:
            progress(i + 1, len(asked))
    return rows


def _shown_confidence(models: dict[str, Any], row: dict[str, Any]) -> float:
    answered = not row["declined"] and bool(row["signals"])
    return calibrated_confidence(models, row["signals"], answered=answered, failed=bool(row["failed_steps"]))[0]


def _offset_entry(model: str, path: str | Path = OFFSET_FILE) -> tuple[dict[str, Any] | None, str | None]:
    """(the measured offset entry for ``model``, the model it was measured on): its own, the same family's by
    name, else another model's — borrowed and said so. (None, None) where none was measured."""
    try:
        models = json.loads(Path(path).read_text(encoding="utf-8")).get("models", {})
    except (OSError, ValueError):
        return None, None
    if not models:
        return None, None
    name = model if model in models else next((m for m in sorted(models, key=len, reverse=True) if m in str(model).lower()), None)
    if name:
        return models[name], name
    first = next(iter(models))
    return models[first], f"{first} (borrowed: none measured for {model})"


def shipped_offset(model: str, path: str | Path = OFFSET_FILE) -> tuple[float, str | None]:
    """(the generated-question logit offset for ``model``, the model it was measured on): its own, the same
    family's by name, else one measured for another model — borrowed and said so: the gap between generated and
    people's questions is mostly the questions' own, so another model's offset is nearer than none. (0.0, None)
    where none was measured."""
    entry, name = _offset_entry(model, path)
    return (float(entry["logit_offset"]), name) if entry else (0.0, None)


def shipped_offset_interval(model: str, path: str | Path = OFFSET_FILE) -> tuple[float, float] | None:
    """The 95 % bootstrap interval of the offset :func:`shipped_offset` gives ``model`` (:func:`offset_interval`),
    or None where it was not measured."""
    entry, _ = _offset_entry(model, path)
    interval = (entry or {}).get("logit_offset_interval95")
    return (float(interval[0]), float(interval[1])) if interval else None


def offset_interval_text(offset: dict[str, Any]) -> str:
    """", 95% interval a to b" for ``refit()``'s ``offset`` entry where its interval was measured, else "": one
    wording for the CLI report and the notebook caption."""
    interval = offset.get("interval95")
    return f", 95% interval {interval[0]:+.2f} to {interval[1]:+.2f}" if interval else ""


def _shifted(fit: dict[str, Any], shift: float) -> dict[str, Any]:
    return {**fit, "intercept": round(fit["intercept"] + shift, 6)}


def platt_scaled(fit: dict[str, Any], slope: float, shift: float) -> dict[str, Any]:
    """``fit`` recalibrated: P = sigmoid(slope · logit(fit's P) + shift), written in the fit's own format (every
    coefficient times ``slope``, the intercept ``slope`` · intercept + ``shift``), so the engine reads it unchanged.
    With a positive slope the ranking — ROC AUC — is the original fit's."""
    return {**fit, "coef": [round(slope * c, 6) for c in fit["coef"]], "intercept": round(slope * fit["intercept"] + shift, 6)}


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def platt_fit(logits: Sequence[float], correct: Sequence[bool], prior: float = PLATT_PRIOR, slope: float | None = None) -> tuple[float, float]:
    """(slope, shift) minimising the log loss of sigmoid(slope · z + shift) on ``logits`` z, plus ``prior`` ·
    ((slope − 1)² + shift²) / 2, by Newton's method; the slope stays at least :data:`MIN_SLOPE`. With ``slope``
    given, only the shift is fitted."""
    a, b = (1.0 if slope is None else slope), 0.0
    y = [1.0 if c else 0.0 for c in correct]
    for _ in range(100):
        ga, gb = prior * (a - 1.0), prior * b
        haa, hab, hbb = prior, 0.0, prior
        for z, yi in zip(logits, y):
            p = 1.0 / (1.0 + math.exp(-max(min(a * z + b, 30.0), -30.0)))
            w = p * (1 - p)
            ga += (p - yi) * z
            gb += p - yi
            haa += w * z * z
            hab += w * z
            hbb += w
        if slope is None:
            det = haa * hbb - hab * hab
            step_a, step_b = (hbb * ga - hab * gb) / det, (haa * gb - hab * ga) / det
            a = max(a - step_a, MIN_SLOPE)
        else:
            step_a, step_b = 0.0, gb / max(hbb, 1e-9)
        b -= step_b
        if abs(step_a) < 1e-8 and abs(step_b) < 1e-8:
            break
    return a, b


def recalibrated(fit: dict[str, Any], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``fit`` Platt-scaled on ``rows`` (answered rows with signals), in the fit's own format."""
    slope, shift = platt_fit([_logit(predict(fit, r["signals"])) for r in rows], [bool(r["correct"]) for r in rows])
    return {**platt_scaled(fit, slope, shift), "platt": {"slope": round(slope, 4), "shift": round(shift, 4), "n": len(rows)}}


def difficulty_offset(fit: dict[str, Any], real_rows: Sequence[dict[str, Any]]) -> float:
    """The logit shift that makes ``fit`` (learned on generated questions) best calibrated, by log loss, on
    people's questions ``real_rows`` (answered rows with signals): :func:`platt_fit` with the slope held at 1."""
    answered = [r for r in real_rows if not r["declined"] and r["signals"]]
    if not answered or len({bool(r["correct"]) for r in answered}) < 2:
        raise ValueError("the offset needs answered real questions, some right and some wrong")
    return platt_fit([_logit(predict(fit, r["signals"])) for r in answered], [bool(r["correct"]) for r in answered], prior=0.0, slope=1.0)[1]


def offset_interval(generated_rows: Sequence[dict[str, Any]], real_rows: Sequence[dict[str, Any]], model: str, resamples: int = 1000,
                    seed: int = 0) -> dict[str, Any]:
    """How far the measured offset could move on another sample of the same size: a bootstrap that redraws the
    paragraphs (``group``) of both sets with replacement — questions of one paragraph are not independent —
    recalibrates on the redrawn generated rows and measures :func:`difficulty_offset` on the redrawn real ones.
    Returns the 2.5 / 50 / 97.5 percentiles and how many redraws could not be fitted (too few rows, one class)."""
    import random

    def by_group(rows: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        groups: dict[Any, list[dict[str, Any]]] = {}
        for r in rows:
            groups.setdefault(r.get("group", r["id"]), []).append(r)
        return list(groups.values())

    generated_groups, real_groups = by_group(generated_rows), by_group(real_rows)
    rng = random.Random(seed)
    offsets, unfitted = [], 0
    for _ in range(resamples):
        generated = [r for g in rng.choices(generated_groups, k=len(generated_groups)) for r in g]
        real = [r for g in rng.choices(real_groups, k=len(real_groups)) for r in g]
        try:
            offsets.append(difficulty_offset(refit(generated, model, agentic=False, offset=0.0)["unshifted_fit"], real))
        except ValueError:  # TooFewItemsError included
            unfitted += 1
    if not offsets:
        raise ValueError("no bootstrap redraw could be fitted")
    offsets.sort()

    def percentile(q: float) -> float:
        return round(offsets[min(len(offsets) - 1, max(0, round(q * (len(offsets) - 1))))], 4)
    return {"low": percentile(0.025), "median": percentile(0.5), "high": percentile(0.975), "resamples": resamples, "unfitted": unfitted,
            "generated_paragraphs": len(generated_groups), "real_paragraphs": len(real_groups)}


def refit(rows: Sequence[dict[str, Any]], model: str, agentic: bool, folds: int = 5, shipped: dict[str, Any] | None = None,
          offset: float | None = None, method: str | None = None) -> dict[str, Any]:
    """Refit the confidence of ``model`` on ``rows``; before (shipped fit) and after (out-of-fold) scores, and the calibration to save.

    ``method``: ``"recalibrate"`` (the default where a shipped fit exists: slope and shift on its logit) or
    ``"refit"`` (every weight learned on ``rows``; the default for a model with no shipped fit).
    ``offset``: the generated-question logit offset (default: the one measured for ``model``), applied in
    proportion to the share of answered rows that were generated; "after" includes it, "after_without_offset" does not."""
    answered = [r for r in rows if not r["declined"] and r["signals"]]
    if len(answered) < MIN_ROWS:
        raise TooFewItemsError(f"{len(answered)} answered items with signals: at least {MIN_ROWS} are needed to fit a calibration "
                               "(generate a larger test set: ragkit testset generate -n 100)")
    fit_name = "agentic" if agentic else "base"
    # the engine's grounded answers carry evidence signals; a set without them (free answers) fits the core six
    features = GROUNDED_SIGNALS if any("evidence_score" in r["signals"] for r in answered) else CORE_SIGNALS
    if agentic and any("support" in r["signals"] for r in answered):
        features = features + ("support",)
    calibrated_as, shipped_models = model_calibration(model, shipped)
    shipped_models = shipped_models or {}
    shipped_fit = (shipped_models.get("answer") or {}).get(fit_name)
    method = method or ("recalibrate" if shipped_fit else "refit")
    if method not in ("recalibrate", "refit"):
        raise ValueError(f"method must be 'recalibrate' or 'refit', not {method!r}")
    if method == "recalibrate" and not shipped_fit:
        raise ValueError(f"no shipped {fit_name} fit for {model} to recalibrate: use method='refit'")

    def fitted_on(train: Sequence[dict[str, Any]]) -> dict[str, Any]:
        if method == "recalibrate":
            return recalibrated(shipped_fit, train)
        return fit_model_cv([r["signals"] for r in train], [r["correct"] for r in train], features, folds, [r["group"] for r in train])
    before = [_shown_confidence(shipped_models, r) for r in rows]

    generated_share = sum(bool(r.get("generated")) for r in answered) / len(answered)
    per_generated, offset_of = shipped_offset(model) if offset is None else (offset, "given")
    shift = per_generated * generated_share
    interval = shipped_offset_interval(model) if offset is None else None

    groups = [r["group"] for r in answered]
    fold_of = dict(zip((r["id"] for r in answered), _folds_of(len(answered), folds, groups)))
    out_of_fold: dict[str, float] = {}
    out_of_fold_unshifted: dict[str, float] = {}
    for k in range(folds):
        train = [r for r in answered if fold_of[r["id"]] != k]
        if len(train) < MIN_ROWS // 2 or len({r["correct"] for r in train}) < 2:
            continue
        fit = fitted_on(train)
        for target, trial_fit in ((out_of_fold, _shifted(fit, shift)), (out_of_fold_unshifted, fit)):
            trial = {**shipped_models, "answer": {**(shipped_models.get("answer") or {}), fit_name: trial_fit}}
            for r in answered:
                if fold_of[r["id"]] == k:
                    target[r["id"]] = _shown_confidence(trial, r)

    def answered_or_shipped(out: dict[str, float]) -> list[float]:
        return [out.get(r["id"], 0.0) if (not r["declined"] and r["signals"]) else _shown_confidence(shipped_models, r) for r in rows]

    kept = [i for i, r in enumerate(rows) if r["declined"] or not r["signals"] or r["id"] in out_of_fold]
    correct = [bool(r["correct"]) for r in rows]

    final = fitted_on(answered)
    how = "recalibrated on the user's test set (Platt scaling of the shipped fit)" if method == "recalibrate" else "refitted on the user's test set"
    saved = {**_shifted(final, shift), "selected": how, "generated_question_offset": round(shift, 4)}
    models = {**shipped_models, "answer": {**(shipped_models.get("answer") or {}), fit_name: saved}}
    calibration = {"definition": DEFINITION, "calibrated_on": "the user's test set (ragkit calibrate)", "models": {model: models}}

    def scored(confidences: list[float]) -> dict[str, Any]:
        picked_c, picked_y = [confidences[i] for i in kept], [correct[i] for i in kept]
        return {**score(picked_c, picked_y), "bins": reliability_bins(picked_c, picked_y), "pairs": list(zip(picked_c, picked_y))}

    def scored_after(out: dict[str, float]) -> dict[str, Any]:
        entry = scored(answered_or_shipped(out))
        if method == "recalibrate":
            # Pooling out-of-fold predictions of five slightly different (slope, shift) pairs reorders answers
            # across folds, which lowers a pooled ROC AUC that no single fit has. The ranking does not depend
            # on the fit (a positive slope keeps the shipped order), so the AUC shown is the saved fit's own;
            # the pooled figure is kept beside it. ECE stays out of fold.
            own = [_shown_confidence(models, r) for r in rows]
            entry = {**entry, "auc_pooled_out_of_fold": entry["auc"], "auc": score([own[i] for i in kept], [correct[i] for i in kept])["auc"]}
        return entry

    return {
        "model": model, "fit": fit_name, "method": method, "shipped_fit_of": calibrated_as, "items": len(rows), "answered": len(answered), "scored": len(kept),
        "right": round(sum(correct[i] for i in kept) / max(len(kept), 1), 4), "folds": folds, "features": list(final["features"]),
        "platt": final.get("platt"),
        "offset": {"logit_per_generated": round(per_generated, 4), "generated_share": round(generated_share, 4), "logit": round(shift, 4),
                   "measured_for": offset_of,
                   **({"interval95": [round(interval[0] * generated_share, 4), round(interval[1] * generated_share, 4)]} if interval else {})},
        "before": scored(before), "after": scored_after(out_of_fold), "after_without_offset": scored_after(out_of_fold_unshifted),
        "calibration": calibration,
        "unshifted_fit": final,
    }


def save_beside_index(index_dir: str | Path, calibration: dict[str, Any]) -> Path:
    """Write ``calibration`` as the index's own (atomically and durably: a crash leaves the old file or the new one)."""
    from ragkit.index.versions import write_file_durably

    path = Path(index_dir) / CALIBRATION_NAME
    write_file_durably(path, json.dumps(calibration, indent=1).encode("utf-8"), CALIBRATION_NAME)
    return path


def calibration_beside_index(index_dir: str | Path | None) -> dict[str, Any] | None:
    """The index's own calibration (``ragkit calibrate``), or None: the shipped one applies. A damaged file is ignored."""
    if not index_dir or "://" in str(index_dir):
        return None
    path = Path(index_dir) / CALIBRATION_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("models"), dict) else None


__all__ = ["CALIBRATION_NAME", "TooFewItemsError", "calibration_beside_index", "collect_rows", "difficulty_offset", "offset_interval",
           "offset_interval_text", "platt_fit", "platt_scaled", "recalibrated", "refit", "save_beside_index", "shipped_offset",
           "shipped_offset_interval"]
