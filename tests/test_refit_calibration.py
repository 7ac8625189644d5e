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


def test_recalibrating_on_overconfident_rows_lowers_the_out_of_fold_ece_and_keeps_the_shipped_ranking():
    rows = forum_rows(160)
    outcome = refit(rows, MODEL, agentic=False, folds=5, offset=0.0)
    before, after = outcome["before"], outcome["after"]
    assert outcome["method"] == "recalibrate"
    assert before["mean_confidence"] > outcome["right"] + 0.15  # the shipped fit claims more than is right
    assert after["ece"] < before["ece"] - 0.1 and after["ece"] <= 0.12
    assert after["auc"] == pytest.approx(before["auc"])  # the saved fit orders answers as the shipped one
    assert 0.5 < after["auc_pooled_out_of_fold"] <= 1  # five folds' slightly different maps, pooled: kept beside it
    assert outcome["scored"] == 160 and outcome["answered"] == 160
    fit = outcome["calibration"]["models"][MODEL]["answer"]["base"]
    assert fit["selected"].startswith("recalibrated") and fit["platt"]["n"] == 160 and 0 < fit["platt"]["slope"]
    # the saved fit orders every answer as the shipped one does
    from ragkit.eval.calibration import predict

    shipped_fit = shipped_calibration()["models"][MODEL]["answer"]["base"]
    order = lambda f: sorted(range(len(rows)), key=lambda i: (predict(f, rows[i]["signals"]), i))  # noqa: E731
    assert order(fit) == order(shipped_fit)
    # the agentic fit and the lacks-answer model stay the shipped ones
    shipped = shipped_calibration()["models"][MODEL]
    assert outcome["calibration"]["models"][MODEL]["answer"]["agentic"] == shipped["answer"]["agentic"]
    assert outcome["calibration"]["models"][MODEL]["lacks_answer"] == shipped["lacks_answer"]


@pytest.mark.parametrize("method", ["recalibrate", "refit"])
def test_after_is_scored_only_on_items_whose_chunk_the_fit_never_saw(monkeypatch, method):
    import ragkit.eval.refit as refit_module

    seen: list[set] = []
    rows = forum_rows(100, seed=3)
    group_of = {json.dumps(r["signals"], sort_keys=True): r["group"] for r in rows}
    real_recalibrated, real_fit = refit_module.recalibrated, refit_module.fit_model_cv

    def spy_recalibrated(fit, train):
        seen.append({r["group"] for r in train})
        return real_recalibrated(fit, train)

    def spy_fit(signals, labels, features, folds=5, groups=None):
        seen.append({group_of[json.dumps(s, sort_keys=True)] for s in signals})
        return real_fit(signals, labels, features, folds, groups)

    monkeypatch.setattr(refit_module, "recalibrated", spy_recalibrated)
    monkeypatch.setattr(refit_module, "fit_model_cv", spy_fit)
    assert refit(rows, MODEL, agentic=False, folds=4, method=method)["method"] == method
    per_fold = seen[:-1]  # the last fit is the final one, on every row
    assert len(per_fold) == 4 and seen[-1] == {r["group"] for r in rows}
    for groups in per_fold:  # each fold's fit leaves whole chunks out
        left_out = {r["group"] for r in rows} - groups
        assert left_out and not (left_out & groups)


def test_platt_fit_recovers_slope_and_shift_and_never_flips_the_ranking():
    import math

    from ragkit.eval.refit import platt_fit

    rng = random.Random(5)
    logits = [rng.uniform(-4, 4) for _ in range(5000)]
    correct = [rng.random() < 1 / (1 + math.exp(-(0.5 * z - 1.2))) for z in logits]
    slope, shift = platt_fit(logits, correct)
    assert slope == pytest.approx(0.5, abs=0.06) and shift == pytest.approx(-1.2, abs=0.12)
    inverted = [not c for c in correct]  # a signal that ranks backwards on this text: flattened, never flipped
    assert platt_fit(logits, inverted)[0] == pytest.approx(0.05)
    # every answer right: finite, pulled toward the shipped fit rather than to an infinite shift
    slope, shift = platt_fit(logits[:40], [True] * 40)
    assert math.isfinite(slope) and 0 < shift < 10


def test_a_model_without_a_shipped_fit_gets_every_weight_refitted_and_an_unknown_method_is_refused():
    rows = forum_rows(120)
    outcome = refit(rows, "my-model", agentic=False, shipped={"models": {}}, offset=0.0)
    assert outcome["method"] == "refit" and outcome["platt"] is None
    assert outcome["calibration"]["models"]["my-model"]["answer"]["base"]["selected"].startswith("refitted")
    with pytest.raises(ValueError, match="no shipped base fit"):
        refit(rows, "my-model", agentic=False, shipped={"models": {}}, method="recalibrate")
    with pytest.raises(ValueError, match="'recalibrate' or 'refit'"):
        refit(rows, MODEL, agentic=False, method="isotonic")


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


def test_the_generated_question_offset_is_the_shift_that_calibrates_a_fit_on_real_questions():
    import math

    from ragkit.eval.refit import difficulty_offset

    fit = {"features": ["token_p_min"], "mean": [0.5], "scale": [0.2], "coef": [1.5], "intercept": 1.0}
    rng = random.Random(3)
    real = []
    for i in range(4000):  # people's questions: the same signal, one logit harder
        p_min = rng.uniform(0.1, 0.9)
        z = 1.0 + 1.5 * (p_min - 0.5) / 0.2 - 1.0
        real.append({"id": f"r{i}", "declined": False, "signals": {"token_p_min": p_min}, "correct": rng.random() < 1 / (1 + math.exp(-z))})
    assert difficulty_offset(fit, real) == pytest.approx(-1.0, abs=0.15)
    with pytest.raises(ValueError, match="some right and some wrong"):
        difficulty_offset(fit, [{**r, "correct": True} for r in real[:10]])


def test_the_refit_moves_its_intercept_by_the_offset_times_the_share_of_generated_rows(tmp_path):
    from ragkit.eval.refit import shipped_offset

    rows = forum_rows(120)
    for i, r in enumerate(rows):
        r["generated"] = i % 4 != 0  # three in four generated, the rest labelled by a person
    plain = refit(rows, MODEL, agentic=False, offset=0.0)
    moved = refit(rows, MODEL, agentic=False, offset=-0.8)
    assert moved["offset"] == {"logit_per_generated": -0.8, "generated_share": 0.75, "logit": -0.6, "measured_for": "given"}
    saved, unshifted = moved["calibration"]["models"][MODEL]["answer"]["base"], plain["calibration"]["models"][MODEL]["answer"]["base"]
    assert saved["intercept"] == pytest.approx(unshifted["intercept"] - 0.6, abs=1e-6) and saved["coef"] == unshifted["coef"]
    assert moved["after"]["mean_confidence"] < moved["after_without_offset"]["mean_confidence"]
    assert moved["after_without_offset"] == plain["after"]  # the offset is the only difference
    # the shipped offsets: a model's own, a served name holding it, none for an unknown model
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"models": {MODEL: {"logit_offset": -0.7}}}))
    assert shipped_offset(MODEL, offsets) == (-0.7, MODEL) and shipped_offset(f"/models/{MODEL}-q4.gguf", offsets) == (-0.7, MODEL)
    assert shipped_offset("mistral-7b", offsets) == (-0.7, f"{MODEL} (borrowed: none measured for mistral-7b)")
    assert shipped_offset(MODEL, tmp_path / "missing.json") == (0.0, None)
    # its bootstrap interval, where measured, travels with it; scaled like the offset by the generated share
    from ragkit.eval.refit import shipped_offset_interval

    assert shipped_offset_interval(MODEL, offsets) is None
    offsets.write_text(json.dumps({"models": {MODEL: {"logit_offset": -0.7, "logit_offset_interval95": [-1.2, -0.1]}}}))
    assert shipped_offset_interval("mistral-7b", offsets) == (-1.2, -0.1)
    interval = shipped_offset_interval(MODEL)
    shipped = refit(rows, MODEL, agentic=False)
    assert interval and shipped["offset"]["interval95"] == [round(interval[0] * 0.75, 4), round(interval[1] * 0.75, 4)]
    assert interval[0] < shipped["offset"]["logit_per_generated"] < interval[1]


def test_the_offset_interval_is_a_bootstrap_over_paragraphs_around_the_measured_offset():
    from ragkit.eval.refit import difficulty_offset, offset_interval

    def marked(rows, generated):
        return [{**r, "generated": generated} for r in rows]
    generated, real = marked(forum_rows(80, seed=1), True), marked(forum_rows(120, seed=2), False)
    for r in real[::3]:
        r["correct"] = False  # people's questions: harder, so the offset is negative
    measured = difficulty_offset(refit(generated, MODEL, agentic=False, offset=0.0)["unshifted_fit"], real)
    interval = offset_interval(generated, real, MODEL, resamples=60, seed=5)
    assert interval["low"] < measured < interval["high"] and interval["low"] <= interval["median"] <= interval["high"]
    assert interval["high"] < 0  # the harder real set
    assert (interval["generated_paragraphs"], interval["real_paragraphs"], interval["resamples"]) == (40, 60, 60)
    assert interval == offset_interval(generated, real, MODEL, resamples=60, seed=5)  # seeded: the same figures again
    # four times the questions: the offset is known about twice as closely
    larger = offset_interval(marked(forum_rows(320, seed=1), True), marked(forum_rows(480, seed=2), False), MODEL, resamples=60, seed=5)
    assert larger["high"] - larger["low"] < interval["high"] - interval["low"]


def test_platt_scaled_fit_is_the_sigmoid_of_the_scaled_logit_in_the_fit_format():
    import math

    from ragkit.eval.calibration import predict
    from ragkit.eval.refit import platt_scaled

    fit = {"features": ["a", "b"], "mean": [0.2, 0.5], "scale": [0.3, 0.2], "coef": [1.5, -0.7], "intercept": -0.4}
    scaled = platt_scaled(fit, slope=0.6, shift=-1.0)
    for signals in ({"a": 0.9, "b": 0.1}, {"a": 0.1, "b": 0.8}, {"a": 0.5}):
        p = predict(fit, signals)
        expected = 1 / (1 + math.exp(-(0.6 * math.log(p / (1 - p)) - 1.0)))
        assert abs(predict(scaled, signals) - expected) < 1e-5
    assert scaled["features"] == fit["features"] and fit["coef"] == [1.5, -0.7]  # the shipped fit is not changed


def test_the_calibrate_report_fits_80_columns_and_names_the_recalibration_and_the_borrowed_offset():
    import io

    from rich.console import Console

    from ragkit.ui.cli_eval import print_refit

    rows = forum_rows(120)
    for r in rows:
        r["generated"] = True
    outcome = refit(rows, "qwen2.5-coder-7b", agentic=False)  # no offset measured for it: borrowed, and said so
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None, force_terminal=False)
    print_refit(console, outcome)
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "recalibrated (after)" in text and "recalibrated, no offset" in text and "shipped fit (before)" in text
    assert "same ranking" in text and "borrowed from qwen2.5-coder-0.5b" in text
    low, high = outcome["offset"]["interval95"]
    assert f"95% interval {low:+.2f} to {high:+.2f}" in " ".join(text.split())
    assert f"{outcome['after']['ece']:6.3f}" in text


def test_the_notebook_figure_shows_the_committed_measurement_when_the_test_set_is_small(tmp_path):
    from ragkit.ui.eval_view import confidence_refit_figure

    measured = tmp_path / "calibration.json"
    pair_rows = [[0.8, True], [0.6, False], [0.3, False], [0.7, True]]
    side = {"ece": 0.1, "auc": 0.7, "mean_confidence": 0.5, "pairs": pair_rows}
    measured.write_text(json.dumps({"refit": {MODEL: {
        "fit_on": {"what": "78 generated questions", "right": 0.7}, "offset": {"logit": -0.9},
        "scored_on": {"what": "80 gold questions", "right": 0.48, "before": side, "after_without_offset": {**side, "ece": 0.24},
                      "after": {**side, "ece": 0.08}}}}}))
    figure, caption = confidence_refit_figure(None, [EvalItem("Q?", ["a"], chunks=["c"])], MODEL, measured)
    assert figure is not None and "ECE 0.100 → 0.240 → 0.080" in caption and "recalibrated + offset" in caption
    assert "-0.90 logit" in caption
    # the splits pooled, where measured, are the figure shown; a shipped fit better than the recalibration is said so
    data = json.loads(measured.read_text())
    pooled = json.loads(json.dumps(data["refit"][MODEL]))
    pooled["scored_on"].update(what="160 gold questions (splits 1, 2 pooled)", before={**side, "ece": 0.05}, after={**side, "ece": 0.07})
    pooled["offset"]["interval95"] = [-1.5, -0.2]
    measured.write_text(json.dumps({**data, "refit_pooled": {MODEL: pooled}}))
    _, caption = confidence_refit_figure(None, [], MODEL, measured)
    assert "160 gold questions (splits 1, 2 pooled)" in caption and "shipped fit stays the better one" in caption
    assert "-0.90 logit, 95% interval -1.50 to -0.20" in caption and "were easier (70% right against 48%" in caption
    # generated questions no easier than the real ones: the caption does not claim they were, and says the offset overshoots
    pooled["fit_on"]["right"] = 0.5
    measured.write_text(json.dumps({**data, "refit_pooled": {MODEL: pooled}}))
    _, caption = confidence_refit_figure(None, [], MODEL, measured)
    assert "about as hard as the real ones here (50% right against 48%" in caption and "further than this text needs" in caption
    none, why = confidence_refit_figure(None, [], "other-model", measured)
    assert none is None and "no committed measurement for other-model" in why


def test_the_offset_pools_every_committed_draw_of_paragraphs_and_reports_each_draw_alone(tmp_path, monkeypatch):
    from conftest import bench_module

    from ragkit.eval.refit import offset_interval

    def marked(rows, generated, draw):
        return [{**r, "id": f"d{draw}{r['id']}", "group": f"d{draw}{r['group']}", "generated": generated} for r in rows]
    with bench_module("calibration_refit") as bench:
        monkeypatch.setattr(bench, "ROWS", tmp_path / "rows")
        monkeypatch.setattr(bench, "OUT", tmp_path / "calibration.json")
        monkeypatch.setattr(bench, "OFFSET_FILE", tmp_path / "offsets.json")
        monkeypatch.setattr(bench, "offset_interval", lambda g, r, m: offset_interval(g, r, m, resamples=40))
        for draw, seed in ((1, 1), (2, 5)):
            generated, real = marked(forum_rows(80, seed=seed), True, draw), marked(forum_rows(100, seed=seed + 1), False, draw)
            for r in real[::draw + 1]:
                r["correct"] = False  # people's questions harder, by a different amount in each draw
            bench.write_rows(bench.offset_rows_name("generated", draw), MODEL, generated)
            bench.write_rows(bench.offset_rows_name("real", draw), MODEL, real)
        assert bench.offset_draws(MODEL) == [1, 2]
        assert bench.rows_file(bench.offset_rows_name("real", 1), MODEL).name == f"offset_real_squad_dev.{MODEL}.jsonl"  # draw 1's committed name
        entry = bench.measure_offset(MODEL, from_rows=True)
    assert (entry["generated"]["n"], entry["real"]["n"]) == (160, 200)
    draws = entry["by_draw"]
    assert [(d["generated"], d["real"]) for d in draws.values()] == [(80, 100), (80, 100)]
    assert draws["1"]["logit_offset"] != draws["2"]["logit_offset"] and (draws["1"]["paragraphs"], draws["2"]["paragraphs"]) == (50, 50)
    assert draws["1"]["command"].endswith(f"offset --model {MODEL}") and draws["2"]["command"].endswith("--draw 2")
    low, high = sorted(d["logit_offset"] for d in draws.values())
    assert low < entry["logit_offset"] < high  # the pooled offset sits between the draws'
    assert (entry["logit_offset_bootstrap"]["generated_paragraphs"], entry["logit_offset_bootstrap"]["real_paragraphs"]) == (80, 100)
    shipped = json.loads((tmp_path / "offsets.json").read_text())["models"][MODEL]
    assert (shipped["generated"], shipped["real"], shipped["logit_offset"]) == (160, 200, entry["logit_offset"])


def test_the_docs_offset_line_names_each_draw_with_its_command_once_there_are_two():
    from conftest import bench_module

    one = {"logit_offset": -0.88, "logit_offset_bootstrap": {"low": -1.66, "high": -0.14},
           "generated": {"what": "78 generated questions", "right": 0.705}, "real": {"what": "120 real questions", "right": 0.517}}
    draws = {"1": {"generated": 78, "real": 120, "paragraphs": 150, "logit_offset": -0.88, "command": "python bench/calibration_refit.py offset --model m"},
             "2": {"generated": 120, "real": 120, "paragraphs": 196, "logit_offset": -1.67,
                   "command": "python bench/calibration_refit.py offset --model m --draw 2"}}
    with bench_module("tables") as tables:
        single = tables.refit_table({"refit_offset": {"m": one}, "refit_offset_commands": {"m": "python bench/calibration_refit.py offset --model m"}})
        pooled = tables.refit_table({"refit_offset": {"m": {**one, "logit_offset": -1.37, "by_draw": draws}},
                                     "refit_offset_commands": {"m": "python bench/calibration_refit.py offset --model m --draw 2"}})
    assert "Offset (m): **-0.88** logit [95% bootstrap interval over paragraphs -1.66 to -0.14]" in single
    assert "(51.7% right): `python bench/calibration_refit.py offset --model m`" in single and "each draw alone" not in single
    assert "Offset (m): **-1.37** logit" in pooled and "each draw alone: draw 1 (78 generated + 120 real, 150 paragraphs) -0.88: " \
        "`python bench/calibration_refit.py offset --model m`; draw 2 (120 generated + 120 real, 196 paragraphs) -1.67: " \
        "`python bench/calibration_refit.py offset --model m --draw 2`" in pooled
