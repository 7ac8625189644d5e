"""Confidence calibration: the metrics, the fit, and that what ships is what the benchmark fitted."""

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragkit.eval.calibration import (
    AGENTIC_SIGNALS, BASE_SIGNALS, CALIBRATION_FILE, answer_signals, expected_calibration_error, fit_model, predict,
    read_rows, reliability_bins, rescore_row, roc_auc, score, scored_rows_path,
)

REPO = Path(__file__).resolve().parent.parent


def test_ece_and_auc_by_hand():
    # two bins: 0.15 (2 answers, 1 right: |0.15 - 0.5|) and 0.85 (2 answers, 2 right: |0.85 - 1|)
    assert expected_calibration_error([0.15, 0.15, 0.85, 0.85], [True, False, True, True]) == pytest.approx((2 * 0.35 + 2 * 0.15) / 4)
    assert roc_auc([0.9, 0.8, 0.3, 0.1], [True, True, False, False]) == 1.0
    assert roc_auc([0.1, 0.3, 0.8, 0.9], [True, True, False, False]) == 0.0
    assert roc_auc([0.5, 0.5], [True, False]) == 0.5  # ties count half
    assert math.isnan(roc_auc([0.5], [True]))
    bins = reliability_bins([0.05, 1.0], [False, True])
    assert bins[0]["n"] == 1 and bins[-1]["n"] == 1 and bins[5]["n"] == 0 and bins[5]["correct"] is None


def test_score_reports_the_share_of_high_confidence_answers_that_are_right():
    out = score([0.9, 0.8, 0.75, 0.2], [True, True, False, False])
    assert out["n"] == 4 and out["high_n"] == 3 and out["high_share_correct"] == pytest.approx(2 / 3, abs=1e-4)


def test_fit_recovers_a_known_relation_and_is_calibrated_in_sample():
    rng = random.Random(0)
    rows, labels = [], []
    for _ in range(2000):
        x = rng.uniform(0, 1)
        rows.append({"token_p_mean": x, "dense_top": rng.uniform(0, 1)})  # dense_top is noise here
        labels.append(rng.random() < 1 / (1 + math.exp(-(6 * x - 3))))
    model = fit_model(rows, labels, ["token_p_mean", "dense_top"], l2=0.1)
    predictions = [predict(model, r) for r in rows]
    assert expected_calibration_error(predictions, labels) < 0.05
    assert roc_auc(predictions, labels) > 0.8
    assert abs(model["coef"][1]) < 0.2 * abs(model["coef"][0])
    # a missing signal is imputed with its calibration mean: it moves nothing
    assert predict(model, {"token_p_mean": 0.5}) == pytest.approx(predict(model, {"token_p_mean": 0.5, "dense_top": model["mean"][1]}))


def test_answer_signals():
    s = answer_signals("Smiljan, Austrian Empire [1]", "Where was Tesla born?", ["Tesla was born in Smiljan, Austrian Empire."])
    assert s["verbatim"] == 1.0 and s["lexical_support"] == 1.0 and s["question_overlap"] == 0.0
    echo = answer_signals("Tesla was born", "Where was Tesla born?", ["Something else entirely."])
    assert echo["verbatim"] == 0.0 and echo["question_overlap"] == 1.0


def test_shipped_calibration_is_what_the_benchmark_fitted(tmp_path):
    """The file in the package equals a refit from the committed calibration rows (bench/calibration.py fit)."""
    shipped = json.loads(CALIBRATION_FILE.read_text())
    assert set(shipped["models"]) == {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"} or shipped["models"], "no model calibrated"
    script = REPO / "bench" / "calibration.py"
    code = (
        "import sys, json; sys.path.insert(0, %r); import calibration as c; "
        "c.CALIBRATION_FILE = __import__('pathlib').Path(%r); c.fit()"
    ) % (str(script.parent), str(tmp_path / "refit.json"))
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, capture_output=True, timeout=300)
    refit = json.loads((tmp_path / "refit.json").read_text())
    assert refit["models"] == shipped["models"]


def test_committed_calibration_scores_are_reproduced_from_the_rows():
    results = REPO / "bench" / "results" / "calibration.json"
    committed = json.loads(results.read_text())
    shipped = json.loads(CALIBRATION_FILE.read_text())
    for model, entry in committed["models"].items():
        rows = read_rows(scored_rows_path(REPO / "bench" / "results", committed, model))
        for config, figures in entry["configs"].items():
            floor = committed["full_floor"] if config == "full" else 0.0
            pairs = [rescore_row(r, shipped["models"][model], floor) for r in rows if r["config"] == config]
            again = score([c for c, _ in pairs], [y for _, y in pairs])
            assert again["n"] == figures["n"] and again["ece"] == pytest.approx(figures["ece"]) and again["auc"] == pytest.approx(figures["auc"])
