"""Confidence refitted on the user's own kind of text: ``ragkit calibrate --testset set.jsonl``.

The shipped confidence is a logistic model per LLM fitted on Wikipedia-style questions
(:mod:`ragkit.eval.calibration`). On other text — forum posts, product reviews — the same signals can
mean something else, and the probability drifts (held-out forum text: mean confidence 0.52 against 36 %
right). This module refits it on the user's generated test set:

* :func:`collect_rows` asks every answerable item with the user's engine and keeps, per item, the
  signals the confidence read, whether the answer is correct (SQuAD token F1 ≥ 0.5 against the test
  set's answer — :data:`ragkit.eval.calibration.DEFINITION`, a decline never correct) and the chunk it
  was written from (its fold group);
* :func:`refit` fits the same kind of model (the fit the engine uses for these features: ``base`` or
  ``agentic``) with cross-validated folds grouped by chunk, so an item's paraphrases never sit on both
  sides, and scores **out-of-fold** predictions: the ECE / ROC AUC it reports for "after" are on items
  the fit never saw; "before" is the shipped fit on the same items;
* :func:`save_beside_index` keeps the result as ``confidence_calibration.json`` in the index folder
  (written atomically), where :func:`calibration_beside_index` finds it; the engine then uses it for
  that index, and the shipped fit stays the default everywhere else. Deleting the file goes back.

Hand-written glue around :mod:`ragkit.eval.calibration` (the fitting itself is there).

Usage::

    rows = collect_rows(rag, items)
    outcome = refit(rows, model="qwen2.5-coder-0.5b", agentic=False)
    outcome["before"]["ece"], outcome["after"]["ece"]
    save_beside_index(index_dir, outcome["calibration"])
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

from ragkit.eval.calibration import (
    AGENTIC_SIGNALS, CORRECT_F1, CORE_SIGNALS, DEFINITION, GROUNDED_SIGNALS, _folds_of, calibrated_confidence, fit_model_cv,
    model_calibration, reliability_bins, score,
)
from ragkit.eval.metrics import f1_score

CALIBRATION_NAME = "confidence_calibration.json"
MIN_ROWS = 30  # fewer answered items than this: too few to fit, said so


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


def refit(rows: Sequence[dict[str, Any]], model: str, agentic: bool, folds: int = 5, shipped: dict[str, Any] | None = None) -> dict[str, Any]:
    """Refit the confidence of ``model`` on ``rows``; before (shipped fit) and after (out-of-fold) scores, and the calibration to save."""
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
    before = [_shown_confidence(shipped_models, r) for r in rows]

    groups = [r["group"] for r in answered]
    fold_of = dict(zip((r["id"] for r in answered), _folds_of(len(answered), folds, groups)))
    out_of_fold: dict[str, float] = {}
    for k in range(folds):
        train = [r for r in answered if fold_of[r["id"]] != k]
        if len(train) < MIN_ROWS // 2 or len({r["correct"] for r in train}) < 2:
            continue
        fit = fit_model_cv([r["signals"] for r in train], [r["correct"] for r in train], features, folds, [r["group"] for r in train])
        trial = {**shipped_models, "answer": {**(shipped_models.get("answer") or {}), fit_name: fit}}
        for r in answered:
            if fold_of[r["id"]] == k:
                out_of_fold[r["id"]] = _shown_confidence(trial, r)
    after = [out_of_fold.get(r["id"], 0.0) if (not r["declined"] and r["signals"]) else _shown_confidence(shipped_models, r) for r in rows]
    kept = [i for i, r in enumerate(rows) if r["declined"] or not r["signals"] or r["id"] in out_of_fold]
    correct = [bool(r["correct"]) for r in rows]

    final = fit_model_cv([r["signals"] for r in answered], [r["correct"] for r in answered], features, folds, groups)
    models = {**shipped_models, "answer": {**(shipped_models.get("answer") or {}), fit_name: {**final, "selected": "refitted on the user's test set"}}}
    calibration = {"definition": DEFINITION, "calibrated_on": "the user's test set (ragkit calibrate)", "models": {model: models}}

    def scored(confidences: list[float]) -> dict[str, Any]:
        picked_c, picked_y = [confidences[i] for i in kept], [correct[i] for i in kept]
        return {**score(picked_c, picked_y), "bins": reliability_bins(picked_c, picked_y), "pairs": list(zip(picked_c, picked_y))}

    return {
        "model": model, "fit": fit_name, "shipped_fit_of": calibrated_as, "items": len(rows), "answered": len(answered), "scored": len(kept),
        "right": round(sum(correct[i] for i in kept) / max(len(kept), 1), 4), "folds": folds, "features": list(features),
        "before": scored(before), "after": scored(after), "calibration": calibration,
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


__all__ = ["CALIBRATION_NAME", "TooFewItemsError", "calibration_beside_index", "collect_rows", "refit", "save_beside_index"]
