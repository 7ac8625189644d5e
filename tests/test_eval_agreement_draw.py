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



def test_a_held_out_set_in_squad_format_is_drawn_as_the_shipped_ones_and_filed_under_its_name(agreement, tmp_path, monkeypatch):
    import gzip
    import json
    import sys

    from ragkit.eval.testset import squad_set_name

    paragraphs = [{"context": f"The tower {p} was built in {1800 + p}.", "qas": [{"id": f"p{p}q{q}", "question": f"When was tower {p} built ({q})?",
                                                                                   "answers": [{"text": str(1800 + p), "answer_start": 0}]} for q in range(3)]}
                  for p in range(6)]
    held_out = tmp_path / "held_out.json.gz"
    with gzip.open(held_out, "wt", encoding="utf-8") as fh:
        json.dump({"version": "1.1", "data": [{"title": "Towers", "paragraphs": paragraphs}]}, fh)
    assert squad_set_name(str(held_out)) == "held_out" and squad_set_name("new_wiki") == "new_wiki"
    docs, chosen = agreement.sampled_paragraphs(str(held_out), 4)
    assert len(docs) == 6 and len(chosen) == 4 and agreement.sampled_paragraphs(str(held_out), 4)[1] == chosen  # seeded
    real = agreement.real_questions(str(held_out), set(chosen), 5)
    assert len(real) == 5 and all(item.chunks[0] in chosen and item.kind == "squad" for item in real)
    with pytest.raises(ValueError, match="--paragraphs 7: .*held_out.json.gz has 6 paragraphs"):
        agreement.sampled_paragraphs(str(held_out), 7)
    for wrong in ("squad_train", str(tmp_path / "missing.json")):  # said by the parser, before anything loads
        monkeypatch.setattr(sys, "argv", ["eval_agreement.py", "--set", wrong])
        with pytest.raises(SystemExit) as stopped:
            agreement.main()
        assert stopped.value.code == 2

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



def test_the_agreement_table_shows_a_held_out_set_that_ran_fewer_strategies(agreement):
    import json

    with bench_module("tables") as tables:
        data = json.loads((ROOT / "bench" / "results" / "eval_agreement.json").read_text())
        three = ["plain", "rerank", "sparse_only"]
        held_out = json.loads(json.dumps(data["sets"]["new_wiki"]))
        held_out.pop("larger_real"), held_out.pop("larger_judge")
        held_out |= {"strategies": three, "command": "python bench/eval_agreement.py --set held_out.json.gz --strategies plain,rerank,sparse_only",
                     "per_strategy": {which: {s: per[s] for s in three} for which, per in held_out["per_strategy"].items()}}
        data["sets"]["held_out"] = held_out
        table = tables.agreement_table(data)
    assert "| held_out | 3 |" in table
    real = held_out["per_strategy"]["real"]
    assert (f"| held_out | real: MRR / right | {real['plain']['mrr']:.2f} / {real['plain']['correct']:.2f} | – | "
            f"{real['rerank']['mrr']:.2f} / {real['rerank']['correct']:.2f} | – |") in table  # hyde and grading: not run on it

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


def test_the_judge_is_also_read_with_a_right_answer_given_as_a_sentence_counted_right(agreement):
    # 20 right short answers the judge scores high; 10 right answers as a sentence (wrong by F1) it also scores high;
    # 10 wrong answers it scores low: against F1 it looks confused, against "holds a gold answer" it is perfect
    rows = [{"id": f"r{j}", "correct": True, "faithfulness": 0.9, "answer": "Oswego [1]", "gold": ["Oswego"]} for j in range(20)]
    rows += [{"id": f"s{j}", "correct": False, "faithfulness": 0.9, "answer": "Montcalm led the attack on Oswego in August. [1]", "gold": ["Oswego"]} for j in range(10)]
    rows += [{"id": f"w{j}", "correct": False, "faithfulness": 0.1, "answer": "Quebec [1]", "gold": ["Oswego"]} for j in range(10)]
    figures = agreement.judge_figures(rows, first_draw=set())
    assert figures["judge_auc"] == 0.75
    assert figures["right_if_it_holds_a_gold_answer"] == {"judge_auc": 1.0, "relabelled": 10, "wrong_by_f1": 20}
    assert "right_if_it_holds_a_gold_answer" not in agreement.judge_figures([{k: v for k, v in r.items() if k != "gold"} for r in rows], set())


def test_a_new_judge_run_keeps_the_one_measured_with_exact_prompt_reuse_beside_it(agreement):
    exact = {"judge_auc": 0.7031, "judge_auc_interval95": [0.637, 0.774], "judge_n": 235, "first_draw": {"judge_auc": 0.7719, "judge_n": 116},
             "command": "python bench/eval_agreement.py --set new_wiki --real 240 --judge-only", "seconds": 714.0}
    aligned = agreement.keeping_the_earlier_figures({"judge_auc": 0.71, "prompt_reuse_block": 64}, exact)
    assert aligned["before_aligned_reuse"] == {k: exact[k] for k in ("judge_auc", "judge_auc_interval95", "judge_n", "first_draw", "command")}
    again = agreement.keeping_the_earlier_figures({"judge_auc": 0.72, "prompt_reuse_block": 64}, aligned)  # a later aligned run keeps it too
    assert again["before_aligned_reuse"] == aligned["before_aligned_reuse"] and again["judge_auc"] == 0.72
    assert "before_aligned_reuse" not in agreement.keeping_the_earlier_figures({"judge_auc": 0.7, "prompt_reuse_block": 64}, None)


def test_a_judge_run_with_another_task_keeps_the_one_it_replaces_by_its_task(agreement):
    p_yes = {"judge_auc": 0.694, "judge_auc_interval95": [0.627, 0.763], "judge_n": 235, "first_draw": {"judge_auc": 0.766, "judge_n": 116},
             "judge_task": "correct", "prompt_reuse_block": 64, "before_aligned_reuse": {"judge_auc": 0.703}}
    product = agreement.keeping_the_earlier_figures({"judge_auc": 0.8, "judge_task": "correct_x_likelihood", "prompt_reuse_block": 64}, dict(p_yes))
    assert product["other_tasks"] == {"correct": p_yes} and "before_aligned_reuse" not in product  # the old run's own history stays with it
    again = agreement.keeping_the_earlier_figures({"judge_auc": 0.81, "judge_task": "correct_x_likelihood", "prompt_reuse_block": 64}, product)
    assert again["other_tasks"] == {"correct": p_yes}  # a rerun of the same task keeps what the first kept
    back = agreement.keeping_the_earlier_figures({"judge_auc": 0.7, "judge_task": "correct", "prompt_reuse_block": 64}, again)
    assert set(back["other_tasks"]) == {"correct_x_likelihood"}  # never a task beside itself
    assert agreement.judged_folder("new_wiki", 240).parent.name == "new_wiki-judged-240"  # P(yes)'s run keeps its folder
    assert agreement.judged_folder("new_wiki", 240, "correct_x_likelihood").parent.name == "new_wiki-judged-240-correct_x_likelihood"
    with bench_module("tables") as tables:
        note = tables.judge_notes("new_wiki", {**again, "real_questions": 240})
    assert ("new_wiki's judge on 240 real questions reads P(yes) to \"is this answer correct?\" times the judge's own likelihood of the answer "
            "(task correct_x_likelihood); P(yes) to \"is this answer correct?\" alone (task correct) gave 0.69 [0.63, 0.76] (235; its first 116: 0.77).") in note
    exact_p_yes = {k: v for k, v in p_yes.items() if k != "prompt_reuse_block"}  # SQuAD dev's: answered and scored before aligned reuse
    with bench_module("tables") as tables:
        older = tables.judge_notes("squad_dev", {**again, "other_tasks": {"correct": exact_p_yes}, "real_questions": 240})
    assert "(235; its first 116: 0.77) in an earlier run under llama.cpp's exact prompt reuse." in older
    import json

    from ragkit.ui.eval_view import agreement_html

    data = json.loads((ROOT / "bench" / "results" / "eval_agreement.json").read_text())
    wiki = data["sets"]["new_wiki"]
    wiki["larger_judge"] = {**again, **{k: p_yes[k] for k in ("judge_auc_interval95", "judge_n", "first_draw")}, "real_questions": 240,
                            "judge_model": "qwen2.5-coder-1.5b", "model": "qwen2.5-coder-0.5b", "command": "python bench/eval_agreement.py --set new_wiki --real 240 --judge-only"}
    with bench_module("tables") as tables:
        table = tables.agreement_table(data)
    assert "0.81 [0.63, 0.76] (235; its first 116: 0.77), task correct_x_likelihood |" in table  # the table says which task it read
    shown = agreement_html(data)
    assert "0.81 on 240 *" in shown and "* the judge&#x27;s faithfulness there is P(yes)" in shown


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
    shown = agreement_html(data)
    assert f">{squad['judge_auc']:.2f}</td>" in shown and "0.74 on 240<" in shown  # no ' *': the same task
    assert "squad_dev's judge on" not in table and "Of its 104" not in table  # a run without them says nothing of them
    squad.pop("larger_real")
    squad["larger_judge"] = agreement.keeping_the_earlier_figures(
        {**judged, "prompt_reuse_block": 64, "right_if_it_holds_a_gold_answer": {"judge_auc": 0.79, "relabelled": 12, "wrong_by_f1": 104}}, judged)
    with bench_module("tables") as tables:
        noted = tables.agreement_table(data)
    assert "before that, with llama.cpp's exact reuse, it was 0.74 [0.66, 0.81] (236)" in noted
    assert "Of its 104 answers wrong by F1 ≥ 0.5, 12 hold a gold answer inside a longer reply; counting those right, the judge's AUC is 0.79" in noted


@pytest.mark.parametrize("name", ["judge_prompt_dev.json", "judge_sources_dev.json", "judge_likelihood_dev.json"])
def test_the_committed_dev_judge_diagnosis_is_what_its_rows_give(name):
    """The holds-a-gold-answer AUCs in the dev judge results are recomputed from their rows and SQuAD dev's gold."""
    import json

    with bench_module("judge_prompt_dev") as dev, bench_module("squad_common") as common:
        result = json.loads((ROOT / "bench" / "results" / name).read_text())
        assert dev.auc_right_if_it_holds_a_gold_answer(result, common.load_squad()[1]) == result["right_if_it_holds_a_gold_answer"]
    assert result["right_if_it_holds_a_gold_answer"]["relabelled"] > 0  # the dev rows do hold right answers given as a sentence


def test_the_committed_answer_likelihood_comparison_is_what_its_rows_give():
    """Each AUC of bench/results/judge_likelihood_dev.json, its halves and the decision written before the run
    (beat P(yes) by 0.03 over all, not below it in either half) recomputed from the rows; the product is P(yes)
    times the geometric-mean token probability, row by row."""
    import json

    from ragkit.eval.calibration import roc_auc

    result = json.loads((ROOT / "bench" / "results" / "judge_likelihood_dev.json").read_text())
    rows = [r for r in result["rows"] if r["scores"]["correct"] is not None]
    for r in rows:
        assert r["scores"]["correct_x_answer_token_p_geomean"] == pytest.approx(r["scores"]["correct"] * r["scores"]["answer_token_p_geomean"])
        assert r["scores"]["answer_p"] == pytest.approx(r["scores"]["answer_token_p_geomean"] ** r["answer_tokens"])
    with bench_module("judge_prompt_dev") as dev, bench_module("squad_common") as common:
        first = {q["id"] for q in dev.dev_draw(*common.load_squad(), 80)}
    halves = {"auc": rows, "auc_first_80": [r for r in rows if r["id"] in first], "auc_after_80": [r for r in rows if r["id"] not in first]}
    for key, subset in halves.items():
        for name in dev.LIKELIHOOD_SCORES:
            assert round(roc_auc([r["scores"][name] for r in subset], [r["right"] for r in subset]), 4) == result[key][name], (key, name)
    for name, better in result["clearly_better"].items():
        assert better == (result["auc"][name] >= result["auc"]["correct"] + 0.03
                          and all(result[h][name] >= result[h]["correct"] for h in ("auc_first_80", "auc_after_80")))
    docs = (ROOT / "docs" / "evaluation.md").read_text()  # the page's table is this file's figures, rounded
    row = lambda name: [f"{result[k][name]:.2f}" for k in ("auc", "auc_first_80", "auc_after_80")] + [f"{result['right_if_it_holds_a_gold_answer']['auc'][name]:.2f}"]  # noqa: E731
    assert "| P(yes), the judge's task today | " + " | ".join(row("correct")) + " |" in docs
    assert "| **P(yes) × the geometric mean** | " + " | ".join(f"**{v}**" for v in row("correct_x_answer_token_p_geomean")) + " |" in docs


def test_a_set_another_model_wrote_is_filed_beside_the_first_and_shares_the_real_questions_runs(agreement):
    # the committed sets were written by the 0.5B; `ragkit testset generate` writes with the 1.5B (bench/writer_model.py)
    import json

    first = agreement.FIRST_WRITER
    assert agreement.run_folder("new_wiki", 120, 240, first, "generated", "plain") == agreement.CACHE / "eval_agreement" / "new_wiki-120-240" / "generated-plain"
    assert agreement.run_folder("new_wiki", 120, 240, "qwen2.5-coder-1.5b", "generated", "plain").parent.name == "new_wiki-120-240-qwen2.5-coder-1.5b"
    assert agreement.run_folder("new_wiki", 120, 240, "qwen2.5-coder-1.5b", "real", "plain") == agreement.run_folder("new_wiki", 120, 240, first, "real", "plain")
    assert agreement.writer_suffix(first) == "" and agreement.writer_suffix("qwen2.5-coder-1.5b") == ".qwen2.5-coder-1.5b"

    data = json.loads((ROOT / "bench" / "results" / "eval_agreement.json").read_text())
    committed = {k: v for k, v in json.loads(json.dumps(data["sets"]["new_wiki"])).items() if k != "by_writer"}  # the first writer's figures
    entry = {**committed, "writer_model": "qwen2.5-coder-1.5b", "real_questions": 240, "kendall_tau": {"retrieval": 0.7, "answer": 0.6}}
    agreement.file_entry(data, "new_wiki", entry)
    stored = data["sets"]["new_wiki"]
    assert {k: v for k, v in stored.items() if k != "by_writer"} == committed  # the first set's figures untouched
    assert agreement.writer_section(data, "new_wiki", "qwen2.5-coder-1.5b", 240)["kendall_tau"]["answer"] == 0.6
    assert agreement.writer_section(data, "new_wiki", first, 240) == committed["larger_real"]
    assert agreement.writer_section(data, "new_wiki", first, 120)["kendall_tau"] == committed["kendall_tau"]
    assert agreement.writer_section(data, "new_wiki", "qwen2.5-coder-1.5b", 120) is None  # not run with 120
    rerun = {**committed, "real_questions": 120}  # the first writer's 120-question run again keeps the other writer's section
    agreement.file_entry(data, "new_wiki", rerun)
    assert "by_writer" in data["sets"]["new_wiki"] and agreement.writer_section(data, "new_wiki", "qwen2.5-coder-1.5b", 240) is not None
    again = {**committed, "real_questions": 240, "kendall_tau": {"retrieval": 0.1, "answer": 0.2}}  # the first writer's 240 run again, by later code
    agreement.file_entry(data, "new_wiki", again)
    assert data["sets"]["new_wiki"]["larger_real"]["kendall_tau"] == {"retrieval": 0.1, "answer": 0.2}
    kept = committed["larger_real"].get("earlier_code", committed["larger_real"])
    assert data["sets"]["new_wiki"]["larger_real"]["earlier_code"] == kept  # the first figures kept beside it
    assert data["sets"]["new_wiki"]["larger_real"]["per_strategy"]["generated"] == committed["per_strategy"]["generated"]  # its own generated runs
    agreement.file_entry(data, "new_wiki", again)  # and again: the first figures stay the kept ones
    assert data["sets"]["new_wiki"]["larger_real"]["earlier_code"] == kept
    fresh = {"sets": {}}  # a held-out set run first with the default writer: its entry is that writer's
    agreement.file_entry(fresh, "held_out", {**entry, "real_questions": 120})
    assert agreement.writer_section(fresh, "held_out", "qwen2.5-coder-1.5b", 120)["writer_model"] == "qwen2.5-coder-1.5b"


def test_the_agreement_table_shows_a_set_another_model_wrote_beside_the_first(agreement):
    import json

    with bench_module("tables") as tables:
        data = json.loads((ROOT / "bench" / "results" / "eval_agreement.json").read_text())
        first = data["sets"]["new_wiki"]
        other = json.loads(json.dumps(first))
        for part in ("larger_real", "larger_judge", "by_writer"):
            other.pop(part, None)
        other |= {"writer_model": "qwen2.5-coder-1.5b", "real_questions": 240, "judge_auc": None, "judge_n": 0,
                  "kendall_tau": {"retrieval": 0.7, "answer": 0.55}, "kendall_tau_interval95": {"retrieval": [0.2, 0.9], "answer": [0.1, 0.8]},
                  "command": "python bench/eval_agreement.py --set new_wiki --real 240 --writer-model qwen2.5-coder-1.5b"}
        generated = {s: {"mrr": 0.5, "correct": 0.25} for s in other["strategies"]}
        other["per_strategy"] = {"generated": generated, "real": first["larger_real"]["per_strategy"]["real"]}
        data["sets"]["new_wiki"]["by_writer"] = {"qwen2.5-coder-1.5b": {"real240": other}}
        table = tables.agreement_table(data)
        assert "| new_wiki, written by the 1.5B, 240 real questions | 9 | 0.70 [0.20, 0.90] | 0.55 [0.10, 0.80] |" in table
        assert "| – (judged on the 120) | 120 (120) | 240 | 0.5b / – |" in table
        assert "| new_wiki | generated by the 1.5B: MRR / right | 0.50 / 0.25 |" in table
        assert "beside the 1.5B's set" not in table  # the shared real runs reproduced: not shown twice
        assert "the other rows' sets were written by the 0.5B" in table and f"`{other['command']}`" in table

        other["per_strategy"]["real"] = {s: {"mrr": 0.1, "correct": 0.1} for s in other["strategies"]}
        assert "| new_wiki | real, 240, beside the 1.5B's set: MRR / right | 0.10 / 0.10 |" in tables.agreement_table(data)
        for entry in data["sets"].values():
            entry.pop("by_writer", None)
        assert "written by" not in tables.agreement_table(data)


def test_notebook_09_shows_every_committed_agreement_measurement_in_a_row_of_its_own():
    """The first run, the same set against a larger real draw, and a set another model wrote: a learner who saw only
    each set's first row read new_wiki's answers τ as 0.25, where 240 real questions give 0.46 and 0.497."""
    import json
    import re

    from ragkit.ui.eval_view import agreement_html

    data = json.loads((ROOT / "bench" / "results" / "eval_agreement.json").read_text())
    shown = agreement_html(data)
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", shown)]
    measured = [(name, e["real_questions"]) for name, e in data["sets"].items()
                for e in [e, *([e["larger_real"]] if e.get("larger_real") else []),
                          *(o for by_size in e.get("by_writer", {}).values() for o in by_size.values())]]
    assert [(r[0], int(r[2])) for r in rows if r] == measured
    wiki = data["sets"]["new_wiki"]
    other = wiki["by_writer"]["qwen2.5-coder-1.5b"]["real240"]
    assert ["new_wiki", "1.5B, 120 of 120", "240", "0.50 [0.06, 0.91]", "0.497 [0.15, 0.73]", "", ""] in rows
    assert other["kendall_tau"]["answer"] < 0.5  # why the row prints three decimals
    assert f"new_wiki&#x27;s 240: {wiki['larger_real']['split_half_tau']['answer']['real']['median']:.2f}" in shown


def test_a_rerun_whose_latencies_moved_but_not_its_figures_is_not_shown_twice():
    import json

    data = json.loads((ROOT / "bench" / "results" / "eval_agreement.json").read_text())
    squad = data["sets"]["squad_dev"]
    rerun = json.loads(json.dumps(squad["per_strategy"]["generated"]))
    for figures in rerun.values():
        figures["p50_s"] += 0.25  # a rerun's seconds always move
    squad["larger_real"] = {**data["sets"]["new_wiki"]["larger_real"], "real_questions": 240}
    squad["larger_real"]["per_strategy"] = {"generated": rerun, "real": squad["per_strategy"]["real"]}
    with bench_module("tables") as tables:
        assert "| squad_dev | generated, again beside the 240:" not in tables.agreement_table(data)
        rerun["plain"]["mrr"] = 0.5
        assert "| squad_dev | generated, again beside the 240: MRR / right | 0.50 / " in tables.agreement_table(data)


def test_a_question_reaches_beyond_its_best_sentence_only_with_words_another_sentence_holds():
    paragraph = "Nikola Tesla was born in Smiljan. He moved to New York in 1884. There he worked for Edison."
    with bench_module("question_reach") as reach:
        # every word the paragraph gives it is in one sentence: within one sentence, whatever else it asks
        assert reach.words_beyond_best_sentence("When did he move to New York, famously?", paragraph) == set()
        # "Tesla" is only in the first sentence, the year's sentence is the best match: the question reaches
        assert reach.words_beyond_best_sentence("When did Tesla move to New York?", paragraph) == {"tesla"}
        # a question of no content word reaches nowhere, and a one-sentence paragraph cannot be reached beyond
        assert reach.words_beyond_best_sentence("Who was he?", paragraph) == set()
        assert reach.words_beyond_best_sentence("Where was Tesla born?", "Nikola Tesla was born in Smiljan") == set()
        assert reach.reach_share([("When did Tesla move to New York?", paragraph), ("Where was Tesla born?", paragraph)]) == {
            "n": 2, "reaching": 1, "share": 0.5}
        assert reach.reach_share([]) == {"n": 0, "reaching": 0, "share": None}


def test_a_generated_set_of_another_size_is_filed_beside_the_committed_ones_never_over_them(agreement):
    # `--generated 240` used to rewrite {set}.generated.{model}.jsonl and the by_writer figures of the 120-item set
    import json

    first, writer = agreement.FIRST_WRITER, "qwen2.5-coder-1.5b"
    assert agreement.generated_suffix(120) == "" and agreement.generated_suffix(240) == ".240"
    assert agreement.run_folder("new_wiki", 240, 240, writer, "generated", "plain").parent.name == "new_wiki-240-240-qwen2.5-coder-1.5b"
    assert agreement.run_folder("new_wiki", 240, 240, writer, "real", "plain") == agreement.run_folder("new_wiki", 120, 240, first, "real", "plain")
    data = json.loads((ROOT / "bench" / "results" / "eval_agreement.json").read_text())
    before = json.loads(json.dumps(data["sets"]["new_wiki"]))
    for model in (first, writer):  # the first writer's larger set too: not over its entry, not as its larger_real
        entry = {**{k: v for k, v in before.items() if k not in ("by_writer", "larger_real", "larger_judge")}, "writer_model": model,
                 "generated": {**before["generated"], "requested": 240}, "real_questions": 240, "kendall_tau": {"retrieval": 0.9, "answer": 0.8}}
        agreement.file_entry(data, "new_wiki", entry)
        assert agreement.writer_section(data, "new_wiki", model, 240, 240)["kendall_tau"] == {"retrieval": 0.9, "answer": 0.8}
    stored = data["sets"]["new_wiki"]
    assert {k: v for k, v in stored.items() if k != "by_writer"} == {k: v for k, v in before.items() if k != "by_writer"}
    assert stored["by_writer"][writer]["real240"] == before["by_writer"][writer]["real240"]  # the 120-item set's figures stay
    assert set(stored["by_writer"][writer]) == {"real240", "real240-generated240"} and set(stored["by_writer"][first]) == {"real240-generated240"}
    assert agreement.writer_section(data, "new_wiki", writer, 240) == before["by_writer"][writer]["real240"]
    with bench_module("tables") as tables:
        table = tables.agreement_table(data)
        assert "new_wiki, written by the 1.5B (240 items), 240 real questions" in table and "new_wiki, written by the 1.5B, 240 real questions" in table


def test_the_writer_context_decision_follows_its_rule_from_the_committed_figures():
    import json

    data = json.loads((ROOT / "bench" / "results" / "writer_context.json").read_text())
    with bench_module("writer_context") as bench:
        assert bench.decide(data["people"]["reach"]["share"], data["contexts"]) == data["decision"]
        # and the rule can choose the passage writer: closer to people's reach, keeping nearly as many
        figures = {"sentence": {"reach": {"all": {"share": 0.1}}, "acceptance": 0.5}, "passage": {"reach": {"all": {"share": 0.25}}, "acceptance": 0.45}}
        assert bench.decide(0.3, figures)["default"] == "passage"
        figures["passage"]["acceptance"] = 0.35
        assert bench.decide(0.3, figures)["default"] == "sentence"
    assert data["decision"]["default"] == "sentence"  # what ragkit.eval.generate's default says


def test_the_rerank_weight_what_if_reorders_only_rows_the_reranker_alone_explains():
    from haystack import Document

    chunks = {f"c{i}": Document(id=f"c{i}", content=f"chunk {i}") for i in range(10)}
    retrieved = [f"c{i}" for i in range(10)]

    class Order:  # a reranker stand-in: a fixed order of the candidates it is given
        def __init__(self, order):
            self.order = order

        def run(self, query, documents):
            return {"documents": [documents[i] for i in self.order][:5]}

    default, candidate = Order([1, 0, 2, 3, 4]), Order([0, 1, 2, 3, 4])
    rows = [{"mrr": 0.5, "sources": ["c1", "c0", "c2", "c3", "c4"], "retrieved": retrieved, "gold_chunks": ["c0"], "question": "q"},  # explained
            {"mrr": 1.0, "sources": ["c0", "c5", "c6", "c7", "c8"], "retrieved": retrieved, "gold_chunks": ["c0"], "question": "q"},  # a second retrieval
            {"mrr": None, "sources": [], "retrieved": retrieved, "gold_chunks": [], "question": "q"}]  # unanswerable
    with bench_module("rerank_weight_agreement") as bench:
        out, counts = bench.reweighted(rows, chunks, default, candidate)
    assert [row["mrr"] for row in out] == [1.0, 1.0, None] and out[0]["sources"][:2] == ["c0", "c1"]
    assert counts == {"rows": 3, "no_retrieval_measure": 1, "reordered": 1, "kept_as_measured": 1, "mrr_changed": 1}


def test_the_readme_summary_names_every_set_another_model_wrote():
    """The summary row carried only the 0.5B sets' figures while `ragkit testset generate` writes with the 1.5B."""
    import json

    data = json.loads((ROOT / "bench" / "results" / "eval_agreement.json").read_text())
    with bench_module("tables") as tables:
        summary = tables.summary_table()
    rewritten = [(writer, entry) for e in data["sets"].values() for writer, by_real in e.get("by_writer", {}).items() for entry in by_real.values()]
    assert rewritten, "the committed figures hold a set another model wrote"
    for writer, entry in rewritten:
        assert (f"{tables.tau_text(entry['kendall_tau']['retrieval'])}, {tables.tau_text(entry['kendall_tau']['answer'])} with "
                f"{entry['real_questions']} and a set the {tables.writer_size(writer)} wrote") in summary
