"""ragkit.eval.agreement and `ragkit agreement`: do two test sets rank the strategies alike (no LLM; rows written here)."""

import json
import random

import pytest
from rich.console import Console

from ragkit.eval.agreement import ranking_agreement
from ragkit.eval.scoring import aggregate

STRATEGIES = ["plain", "hyde", "rerank", "grading", "sparse_only"]


def _run(strategy: str, testset: str, right: list[bool], sources: bool = True) -> dict:
    rows = [{"id": f"{testset}-{i}", "kind": "single", "question": f"q{i}", "answer": "a", "correct": float(r),
             "mrr": (1.0 if r else 0.5) if sources else None, "seconds": 1.0, "failures": []} for i, r in enumerate(right)]
    rows.append({"id": f"{testset}-none", "kind": "unanswerable", "question": "q", "answer": "", "correct": 1.0, "mrr": None, "seconds": 1.0,
                 "failures": []})  # left out of both measures: a set of real questions has none to match it
    meta = {"strategy": {"name": strategy, "version": "builtin"}, "testset": {"path": f"data/{testset}.jsonl", "sha256": testset * 8}, "model": "m"}
    return {"run": meta, "rows": rows, "aggregates": aggregate(rows)}


def _clear(testset: str, order: list[str], n: int = 60, **kwargs) -> list[dict]:
    """Strategies right on nested shares of the items, far apart: 20%, 35%, ... in ``order``'s order, worst first."""
    return [_run(s, testset, [(i * 7 % n) / n < 0.2 + 0.15 * k for i in range(n)], **kwargs) for k, s in enumerate(order)]


def test_two_sets_that_order_the_strategies_alike_are_said_to():
    result = ranking_agreement(_clear("gen", STRATEGIES) + _clear("mine", STRATEGIES, n=40))
    assert result["testsets"] == {"first": "gen.jsonl", "second": "mine.jsonl"} and result["strategies"] == sorted(STRATEGIES)
    for measure in ("retrieval", "answer"):
        figures = result["measures"][measure]
        assert figures["tau"] == 1.0 and figures["interval95"][0] > 0 and (figures["n_first"], figures["n_second"]) == (60, 40)
        assert figures["verdict"].startswith("the two test sets rank the strategies alike (τ +1.00")
        assert figures["split_half"]["first"]["half"] == 30 and figures["split_half"]["second"]["median"] > 0.5


def test_opposite_orders_and_a_noisy_set_are_told_apart():
    reversed_result = ranking_agreement(_clear("gen", STRATEGIES) + _clear("mine", STRATEGIES[::-1]))
    assert reversed_result["measures"]["answer"]["tau"] == -1.0
    assert "in opposite orders" in reversed_result["measures"]["answer"]["verdict"]
    # 12 questions answered right at random (a coin each): its own halves do not reliably agree
    rng = random.Random(0)
    noisy = [_run(s, "mine", [rng.random() < 0.5 for _ in range(12)]) for s in STRATEGIES]
    figures = ranking_agreement(_clear("gen", STRATEGIES) + noisy)["measures"]["answer"]
    assert figures["interval95"][0] <= 0 <= figures["interval95"][1] and figures["split_half"]["second"]["range90"][0] <= 0
    assert figures["verdict"].startswith("no evidence that the two test sets rank the strategies alike")
    assert "mine.jsonl's own halves do not reliably agree" in figures["verdict"] and "more questions would tell" in figures["verdict"]
    # 8 questions on which the strategies differ by one answer: the half without it ties every strategy, every split
    one_apart = [_run(s, "mine", [i < 3 + (k % 2) for i in range(8)]) for k, s in enumerate(STRATEGIES)]
    figures = ranking_agreement(_clear("gen", STRATEGIES) + one_apart)["measures"]["answer"]
    assert figures["split_half"]["second"]["tied"] == 1.0 and "mine.jsonl's halves tie every strategy in 100% of splits" in figures["verdict"]


def test_a_labelled_set_without_sources_has_no_retrieval_figure_and_says_why():
    result = ranking_agreement(_clear("gen", STRATEGIES) + _clear("mine", STRATEGIES, sources=False))
    assert result["measures"]["retrieval"]["tau"] is None
    assert result["measures"]["retrieval"]["verdict"] == "no retrieval figure: mine.jsonl has no item every strategy scored on mrr (its items name no source chunk)"
    assert result["measures"]["answer"]["tau"] == 1.0


def test_runs_that_cannot_be_ranked_are_refused_with_why():
    with pytest.raises(ValueError, match="measured 1 test set; an agreement needs runs on exactly two"):
        ranking_agreement(_clear("gen", STRATEGIES))
    with pytest.raises(ValueError, match="measured 3 test sets"):
        ranking_agreement(_clear("gen", STRATEGIES) + _clear("mine", STRATEGIES) + _clear("other", STRATEGIES))
    with pytest.raises(ValueError, match="two runs of plain on gen.jsonl"):
        ranking_agreement(_clear("gen", STRATEGIES) + _clear("mine", STRATEGIES) + [_run("plain", "gen", [True])])
    with pytest.raises(ValueError, match=r"2 strategies ran on both test sets; a ranking needs at least 3 \(on one set only: grading, rerank, sparse_only\)"):
        ranking_agreement(_clear("gen", STRATEGIES) + _clear("mine", STRATEGIES[:2]))
    few = ranking_agreement(_clear("gen", STRATEGIES) + _clear("mine", STRATEGIES, n=3))["measures"]["answer"]
    assert few["verdict"] == "too few items to rank on mine.jsonl (3; at least 4)"


def test_two_test_files_of_one_name_are_told_apart_by_their_hashes():
    second = _clear("mine", STRATEGIES)
    for run in second:
        run["run"]["testset"]["path"] = "elsewhere/gen.jsonl"
    assert ranking_agreement(_clear("gen", STRATEGIES) + second)["testsets"]["first"].startswith("gen.jsonl (")


@pytest.mark.parametrize("width", [80, 120])
def test_the_agreement_view_fits_the_terminal_with_each_mean_and_rank(width):
    from ragkit.ui.eval_terminal import agreement_group

    result = ranking_agreement(_clear("squad_dev.generated", STRATEGIES) + _clear("my_own_questions_of_the_manual", STRATEGIES[::-1])
                               + [_run("decompose", "squad_dev.generated", [True])])
    console = Console(width=width, record=True, color_system=None)
    console.print(agreement_group(result))
    lines = console.export_text().splitlines()
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    text = " ".join(" ".join(lines).split())
    assert "do my_own_questions_of_the_manual.jsonl and squad_dev.generated.jsonl rank the strategies alike?" in text  # by name
    assert "Left out (run on one test set only): decompose" in text
    assert any(line.split() == ["sparse_only", "0.200", "#5", "0.800", "#1"] for line in lines), lines  # a mean and its rank, whole on its line
    assert "τ -1.00, 95% interval -1.00 to -1.00, over 60 and 60 items" in text
    assert "The two test sets rank the strategies in opposite orders" in text


def test_ragkit_agreement_reads_run_folders_and_writes_its_figures(tmp_path, capsys):
    from ragkit.eval.runs import RUN_FORMAT
    from ragkit.ui.cli import main

    folders = []
    for run in _clear("gen", STRATEGIES) + _clear("mine", STRATEGIES):
        folder = tmp_path / "runs" / f"{run['run']['testset']['path'].split('/')[1][:-6]}-{run['run']['strategy']['name']}"
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps(run["run"] | {"format": RUN_FORMAT}))
        (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in run["rows"]))
        folders.append(str(folder))
    assert main(["agreement", *folders, "--json", str(tmp_path / "agreement.json")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "The two test sets rank the strategies alike (τ +1.00" in out and "wrote" in out
    assert json.loads((tmp_path / "agreement.json").read_text())["measures"]["answer"]["tau"] == 1.0
    assert main(["agreement", *folders[:5]]) == 2  # one test set: one clear line, no traceback
    assert "an agreement needs runs on exactly two" in capsys.readouterr().err


def test_the_runs_made_for_an_agreement_go_one_folder_a_test_set_and_refuse_what_cannot_rank(tmp_path):
    from ragkit.eval.agreement import run_folders
    from ragkit.eval.strategies import resolve

    gen, mine, copy = tmp_path / "set.jsonl", tmp_path / "mine.csv", tmp_path / "again.jsonl"
    gen.write_text('{"question": "q?", "answers": ["a"]}\n')
    mine.write_text("question,answers\nq?,b\n")
    copy.write_bytes(gen.read_bytes())
    three = [resolve(name) for name in ("plain", "rerank", "sparse_only")]
    folders = run_folders([gen, mine], three, tmp_path / "runs")
    assert [f.relative_to(tmp_path / "runs").parts for f in folders] == [
        (f"{stem}-{sha}", name) for stem, sha in (("set", _sha(gen)), ("mine", _sha(mine))) for name in ("plain", "rerank", "sparse_only")]
    (tmp_path / "features.yaml").write_text("rerank: true\n")  # a Features file is labelled by its stem, as its runs are
    assert run_folders([gen, mine], [*three[:2], resolve(tmp_path / "features.yaml")], "runs")[2].name == "features"
    for testsets, strategies, said in (([gen, copy], three, "hold the same bytes"), ([gen, mine], three[:2], "2 strategies given; a ranking needs at least 3"),
                                       ([gen, mine], [*three, three[0]], "plain named twice"), ([gen], three, "needs two test sets, not 1")):
        with pytest.raises(ValueError, match=said):
            run_folders(testsets, strategies, "runs")


def _sha(path) -> str:
    from ragkit.eval.testset import testset_sha256

    return testset_sha256(path)[:8]


def test_ragkit_agreement_on_test_sets_refuses_before_loading_anything(tmp_path, capsys):
    from ragkit.ui.cli import main

    gen = tmp_path / "set.jsonl"
    gen.write_text('{"question": "q?", "answers": ["a"]}\n')
    missing_index = ["--index-dir", str(tmp_path / "no-index")]  # a refusal after loading would say there is no index instead
    for argv, said in ((["--testsets", str(gen), str(gen)], "hold the same bytes"), (["--testsets", str(gen), str(gen), "runs/plain"], "not both"),
                       ([], "give the run folders to compare, or --testsets A B"), (["--testsets", str(gen), str(tmp_path / "x.csv"), "--strategies",
                                                                                         "plain,nope,rerank"], "no strategy 'nope'"),
                       (["--testsets", str(gen), str(tmp_path / "x.csv")], "cannot read the test set")):
        assert main(["agreement", *argv, *missing_index]) == 2
        assert said in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_tau_just_under_a_target_never_prints_as_meeting_it():
    from ragkit.eval.agreement import tau_text

    assert tau_text(0.4975) == "0.497" and tau_text(0.5002) == "0.50" and tau_text(0.6568) == "0.66"
    assert tau_text(0.59996) == "0.5999" and tau_text(0.5) == "0.50" and tau_text(-0.129) == "-0.13"
