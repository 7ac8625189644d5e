"""`ragkit calibrate`: the confidence refitted on the user's test set, scored out of fold, kept beside the index."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest
from haystack.components.generators.chat import MockChatGenerator

from ragkit.eval.calibration import shipped_calibration
from ragkit.eval.refit import CALIBRATION_NAME, TooFewItemsError, calibration_beside_index, collect_rows, refit, save_beside_index
from ragkit.eval.testset import EvalItem

MODEL = "qwen2.5-coder-0.5b"


def forum_rows(n: int, seed: int = 0) -> list[dict]:
    """Rows where the shipped fit is overconfident: every answer looks well supported (sure tokens, verbatim,
    in the sources), yet only the short ones are right — a pattern of text unlike Wikipedia."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        right = rng.random() < 0.35
        rows.append({
            "id": f"q{i}", "group": f"chunk{i // 2}", "declined": False, "correct": right, "failed_steps": [],
            "signals": {"token_p_min": rng.uniform(0.85, 1.0), "token_p_first": rng.uniform(0.9, 1.0), "lexical_support": rng.uniform(0.95, 1.0),
                        "verbatim": 1.0, "answer_words": rng.uniform(1, 2.5) if right else rng.uniform(2, 6), "question_overlap": rng.uniform(0, 0.2)},
        })
    return rows


def test_refitting_on_overconfident_rows_lowers_the_out_of_fold_ece_and_keeps_the_auc():
    rows = forum_rows(160)
    outcome = refit(rows, MODEL, agentic=False, folds=5)
    before, after = outcome["before"], outcome["after"]
    assert before["mean_confidence"] > outcome["right"] + 0.15  # the shipped fit claims more than is right
    assert after["ece"] < before["ece"] - 0.1 and after["ece"] <= 0.12
    assert after["auc"] >= before["auc"] - 0.02
    assert outcome["scored"] == 160 and outcome["answered"] == 160
    fit = outcome["calibration"]["models"][MODEL]["answer"]["base"]
    assert fit["selected"].startswith("refitted") and fit["n"] == 160
    # the agentic fit and the lacks-answer model stay the shipped ones
    shipped = shipped_calibration()["models"][MODEL]
    assert outcome["calibration"]["models"][MODEL]["answer"]["agentic"] == shipped["answer"]["agentic"]
    assert outcome["calibration"]["models"][MODEL]["lacks_answer"] == shipped["lacks_answer"]


def test_after_is_scored_only_on_items_whose_chunk_the_fit_never_saw(monkeypatch):
    import ragkit.eval.refit as refit_module

    seen: list[tuple[set, set]] = []
    real_fit = refit_module.fit_model_cv

    def spy(rows, labels, features, folds=5, groups=None):
        seen.append(set(groups or []))
        return real_fit(rows, labels, features, folds, groups)

    monkeypatch.setattr(refit_module, "fit_model_cv", spy)
    rows = forum_rows(100, seed=3)
    refit(rows, MODEL, agentic=False, folds=4)
    per_fold = seen[:-1]  # the last fit is the final one, on every row
    assert len(per_fold) == 4 and seen[-1] == {r["group"] for r in rows}
    for groups in per_fold:  # each fold's fit leaves whole chunks out
        left_out = {r["group"] for r in rows} - groups
        assert left_out and not (left_out & groups)


def test_too_few_answered_items_is_a_clear_error():
    rows = forum_rows(20)
    with pytest.raises(TooFewItemsError, match="at least 30"):
        refit(rows, MODEL, agentic=False)


def test_a_declined_item_stays_zero_and_wrong():
    rows = forum_rows(80) + [{"id": "d", "group": "x", "declined": True, "correct": False, "failed_steps": [], "signals": {}}]
    outcome = refit(rows, MODEL, agentic=False)
    assert outcome["scored"] == 81 and outcome["answered"] == 80


def test_the_fit_is_kept_beside_the_index_and_the_engine_uses_it(tmp_path, sample_index):
    from ragkit.pipeline.engine import AgenticRAG
    from ragkit.pipeline.features import Features

    index_dir = sample_index.path
    assert calibration_beside_index(index_dir) is None
    outcome = refit(forum_rows(120), MODEL, agentic=False)
    path = save_beside_index(tmp_path, outcome["calibration"])
    assert path.name == CALIBRATION_NAME and calibration_beside_index(tmp_path) == json.loads(path.read_text())
    (tmp_path / CALIBRATION_NAME).write_text("{not json")
    assert calibration_beside_index(tmp_path) is None  # a damaged file: the shipped fit applies
    # an index folder with its own fit: the pipeline's confidence step carries it (and so does an exported YAML)
    from shutil import copytree

    own = tmp_path / "own-index"
    copytree(index_dir, own)
    save_beside_index(own, outcome["calibration"])
    rag = AgenticRAG(Features(), index_dir=str(own), chat_generator=MockChatGenerator("Smiljan [1]."))
    scorer = rag.pipeline.get_component("confidence")
    assert scorer.calibration == outcome["calibration"]
    plain = AgenticRAG(Features(), index_dir=str(index_dir), chat_generator=MockChatGenerator("Smiljan [1]."))
    assert plain.pipeline.get_component("confidence").calibration is None


def test_rows_are_collected_for_answerable_items_with_their_chunk_as_group():
    answers = {"Where was Tesla born?": ("Smiljan [1]", False), "What did he study?": ("The documents don't say.", True)}

    class FakeRag:
        chat_generator = None

        def ask(self, question):
            answer, declined = answers[question]
            return SimpleNamespace(answer=answer, declined=declined, failed_steps=[], confidence=0.7,
                                   details={"confidence": {"token_p_min": 0.9, "lexical_support": 1.0, "not_a_signal": 3}})

    items = [EvalItem("Where was Tesla born?", ["Smiljan"], chunks=["c1"]), EvalItem("What did he study?", ["engineering"], chunks=["c2"]),
             EvalItem("Who founded Rome?", kind="unanswerable")]
    rows = collect_rows(FakeRag(), items)
    assert [r["group"] for r in rows] == ["c1", "c2"]
    assert rows[0]["correct"] and not rows[1]["correct"] and rows[1]["declined"]
    assert "not_a_signal" not in rows[0]["signals"]


def test_ragkit_calibrate_on_a_small_test_set_says_how_many_it_needs_before_asking_anything(sample_index_dir, tmp_path, capsys):
    from ragkit.eval.testset import save_testset
    from ragkit.ui.cli import main

    testset = tmp_path / "set.jsonl"
    save_testset([EvalItem(f"Question {i}?", ["answer"], chunks=[f"c{i}"]) for i in range(5)], testset)
    assert main(["calibrate", "--testset", str(testset), "--index-dir", str(sample_index_dir)]) == 2
    err = capsys.readouterr().err
    assert "5 answerable questions" in err and "at least 30" in err and "Traceback" not in err
    assert not (sample_index_dir / CALIBRATION_NAME).exists()
