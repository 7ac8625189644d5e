"""bench/eval_agreement.py: a larger real set keeps the committed runs' draw and adds to it; the figures and their table."""

from pathlib import Path

import pytest

from conftest import bench_module

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def agreement():
    with bench_module("eval_agreement") as module:
        yield module


@pytest.mark.parametrize("set_name", ["squad_dev", "new_wiki"])
def test_a_larger_real_set_holds_the_committed_one_and_adds_other_questions_of_the_same_paragraphs(agreement, set_name):
    from ragkit.eval.testset import load_testset

    _, chosen = agreement.sampled_paragraphs(set_name, 300)
    committed = [item.id for item in load_testset(ROOT / "bench" / "results" / "eval_agreement" / f"{set_name}.real.jsonl")[0]]
    assert [item.id for item in agreement.real_questions(set_name, set(chosen), 120)] == committed  # the runs' own draw
    larger = agreement.real_questions(set_name, set(chosen), 480)
    assert [item.id for item in larger[:120]] == committed
    assert len({item.id for item in larger}) == 480
    assert all(item.chunks[0] in set(chosen) for item in larger)
    assert [item.id for item in agreement.real_questions(set_name, set(chosen), 480)] == [item.id for item in larger]  # seeded


def test_each_committed_larger_real_set_is_the_scripts_own_draw(agreement):
    """A ``{set}.real{N}.jsonl`` beside the 120-question set is what ``--real N`` draws, question for question."""
    import re

    from ragkit.eval.testset import load_testset

    larger_sets = sorted((ROOT / "bench" / "results" / "eval_agreement").glob("*.real[0-9]*.jsonl"))
    assert larger_sets, "the committed larger real set (new_wiki.real240.jsonl) is missing"
    for path in larger_sets:
        set_name, n = re.fullmatch(r"(.+)\.real(\d+)\.jsonl", path.name).groups()
        _, chosen = agreement.sampled_paragraphs(set_name, 300)
        drawn = [item.id for item in agreement.real_questions(set_name, set(chosen), int(n))]
        assert [item.id for item in load_testset(path)[0]] == drawn, path.name


def synthetic_rows(order: list[str], items: int = 40, prefix: str = "q") -> dict[str, list[dict]]:
    """Rows where the strategies in ``order`` are worse to better by the same step on every question (MRR and answers)."""
    rows = {}
    for rank, name in enumerate(order):
        rows[name] = [{"id": f"{prefix}{j}", "kind": "single", "mrr": (rank + 1) / len(order), "correct": (j % len(order)) <= rank,
                       "faithfulness": 0.9 if (j % len(order)) <= rank else 0.2} for j in range(items)]
    return rows


def test_the_figures_agree_when_both_sets_rank_alike_and_disagree_when_they_reverse(agreement):
    order = ["dense_only", "grading", "plain", "rerank"]
    alike = agreement.agreement_figures({"generated": synthetic_rows(order, prefix="g"), "real": synthetic_rows(order)})
    assert alike["kendall_tau"]["retrieval"] == alike["kendall_tau"]["answer"] == 1.0
    assert alike["split_half_tau"]["retrieval"]["real"]["median"] == 1.0  # a ranking with no noise agrees with itself
    assert alike["judge_auc"] == 1.0 and alike["judge_n"] == 40
    reversed_ = agreement.agreement_figures({"generated": synthetic_rows(order[::-1], prefix="g"), "real": synthetic_rows(order)})
    assert reversed_["kendall_tau"]["retrieval"] == reversed_["kendall_tau"]["answer"] == -1.0
    assert reversed_["scored_items"]["retrieval"] == {"generated": 40, "real": 40}


def test_the_agreement_table_shows_a_larger_real_set_beside_the_first(agreement):
    import json

    with bench_module("tables") as tables:
        data = json.loads((ROOT / "bench" / "results" / "eval_agreement.json").read_text())
        entry = data["sets"]["new_wiki"]
        entry["larger_real"] = {"kendall_tau": {"retrieval": 0.5, "answer": 0.4}, "kendall_tau_interval95": {"retrieval": [0.1, 0.8], "answer": [0.0, 0.7]},
                                "split_half_tau": entry["split_half_tau"], "real_questions": 480, "command": "python bench/eval_agreement.py --set new_wiki --real 480",
                                "per_strategy": {"real": entry["per_strategy"]["real"]}}
        table = tables.agreement_table(data)
    assert "| new_wiki, 480 real questions | 9 | 0.50 [0.10, 0.80] | 0.40 [0.00, 0.70] |" in table
    assert "– (judged on the 120)" in table and "| new_wiki | real, 480: MRR / right |" in table
    assert "`python bench/eval_agreement.py --set new_wiki --real 480`" in table


def test_the_judge_on_a_larger_set_reports_its_interval_its_failures_and_the_first_draw_again(agreement):
    rows = [{"id": f"q{j}", "correct": j % 2 == 0, "faithfulness": 0.9 if j % 2 == 0 else 0.1} for j in range(40)]
    rows += [{"id": "failed", "correct": True, "faithfulness": None}]  # a judge reply that did not parse: counted, not scored
    rows += [{"id": "declined", "correct": False, "declined": True, "faithfulness": None}]  # no answer to judge
    figures = agreement.judge_figures(rows, first_draw={f"q{j}" for j in range(10)})
    assert figures["judge_auc"] == 1.0 and figures["judge_auc_interval95"] == [1.0, 1.0]
    assert figures["judge_n"] == 40 and figures["judge_failed"] == 1 and figures["declined_not_judged"] == 1 and figures["share_right_of_judged"] == 0.5
    assert figures["first_draw"] == {"judge_auc": 1.0, "judge_n": 10}
    # a judge that says the same for right and wrong answers: AUC 0.5, an interval around it
    flat = agreement.judge_figures([{**r, "faithfulness": 0.5} for r in rows[:40]], first_draw=set())
    assert flat["judge_auc"] == 0.5 and flat["judge_auc_interval95"][0] <= 0.5 <= flat["judge_auc_interval95"][1]


def test_judge_only_refuses_the_first_draw_whose_judge_the_full_run_reads(agreement, monkeypatch):
    monkeypatch.setattr("sys.argv", ["eval_agreement.py", "--set", "squad_dev", "--real", "120", "--judge-only"])
    with pytest.raises(SystemExit) as stopped:
        agreement.main()
    assert stopped.value.code == 2


def test_the_agreement_tables_show_the_judge_on_a_larger_real_set_beside_the_first(agreement, monkeypatch):
    import json

    from ragkit.ui.eval_view import agreement_html

    judged = {"judge_auc": 0.74, "judge_auc_interval95": [0.66, 0.81], "judge_n": 236, "declined_not_judged": 4, "judge_failed": 0, "share_right_of_judged": 0.5,
              "first_draw": {"judge_auc": 0.71, "judge_n": 118}, "real_questions": 240, "judge_model": "qwen2.5-coder-1.5b",
              "judge_task": "correct", "model": "qwen2.5-coder-0.5b", "command": "python bench/eval_agreement.py --set squad_dev --real 240 --judge-only"}
    data = json.loads((ROOT / "bench" / "results" / "eval_agreement.json").read_text())
    squad = data["sets"]["squad_dev"]
    squad["larger_judge"] = judged
    squad.pop("larger_real", None)
    with bench_module("tables") as tables:
        table = tables.agreement_table(data)
        committed = tables.load
        monkeypatch.setattr(tables, "load", lambda name: data if name == "eval_agreement.json" else committed(name))
        summary = tables.summary_table()
        # a larger real set of the same size: the judge fills that row's cell instead of a row of its own
        squad["larger_real"] = {**data["sets"]["new_wiki"]["larger_real"], "real_questions": 240, "command": "python bench/eval_agreement.py --set squad_dev --real 240"}
        both = tables.agreement_table(data)
    assert "| squad_dev, 240 real questions, judge only | 1 (plain) | – | – | – | 0.74 [0.66, 0.81] (236; its first 118: 0.71) | – | 240 | 0.5b / 1.5b |" in table
    assert "`python bench/eval_agreement.py --set squad_dev --real 240 --judge-only`" in table
    assert f"judge AUC {squad['judge_auc']:.2f} (0.74 with 240)" in summary
    assert "judge only |" not in both and "0.74 [0.66, 0.81] (236; its first 118: 0.71) | 106 (120) | 240 | 0.5b / 1.5b |" in both
    assert f"{squad['judge_auc']:.2f} (0.74 on 240)" in agreement_html(data)
