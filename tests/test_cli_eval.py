"""The evaluation commands as a user runs them: on a folder ragkit has never seen, and with bad input."""

from __future__ import annotations

import json
import re

import pytest

from ragkit.ui.cli import main

pytestmark = pytest.mark.integration

NEW_FOLDER = {
    "lighthouse.md": "# The Bell Rock Lighthouse\n\nThe Bell Rock Lighthouse stands off the coast of Angus in Scotland. "
                     "It was built between 1807 and 1810 by Robert Stevenson, on a reef that the sea covers twice a day. "
                     "The tower is 35 metres tall and its light can be seen from 56 kilometres away.\n",
    "canal.md": "# The Caledonian Canal\n\nThe Caledonian Canal connects the Scottish east coast at Inverness with the west coast at Corpach. "
                "It was designed by the engineer Thomas Telford and opened in 1822. The canal is 97 kilometres long, "
                "of which only about one third is man-made; the rest runs through Loch Ness, Loch Oich and Loch Lochy.\n",
}


@pytest.fixture
def environment(monkeypatch, tmp_path):
    monkeypatch.setenv("RAGKIT_LLM", "qwen2.5-coder-0.5b")
    monkeypatch.setenv("RAGKIT_MAX_NEW_TOKENS", "48")
    monkeypatch.setenv("RAGKIT_STRATEGIES", str(tmp_path / "strategies"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.llm
def test_generate_evaluate_and_report_on_a_folder_ragkit_has_never_seen(environment, capsys):
    folder = environment / "my_docs"
    folder.mkdir()
    for name, text in NEW_FOLDER.items():
        (folder / name).write_text(text)
    (folder / "map.jpg").write_bytes(b"\xff\xd8\xff")  # a type ragkit does not read: said, not silently left out
    common = ["--index-dir", str(environment / "index"), "--cache", str(environment / "cache.sqlite")]
    assert main(["testset", "generate", str(folder), "-n", "4", "-o", "set.jsonl", *common]) == 0
    said = capsys.readouterr()
    assert "not read 1 file(s) of other types (1 .jpg)" in " ".join(said.out.split()), said.out
    assert re.search(r"questions kept: *\d+%\|.*\| \d+/\d+ .*\d+ tried", said.err)  # minutes of LLM calls show a bar
    tried = re.findall(r"(\d+) tried", said.err)[-1]  # the summary counts what the bar counted (it said 49 to the bar's 45)
    assert f"from {tried} questions tried" in " ".join(said.out.split()), said.out
    items = [json.loads(line) for line in (environment / "set.jsonl").read_text().splitlines()]
    assert items and all(i["kind"] in ("single", "paraphrase", "multi", "unanswerable") for i in items)
    for item in items:
        if item["kind"] in ("single", "paraphrase"):  # an answer copied from the chunk it names
            from ragkit.index.store import RagIndex

            chunk = RagIndex.load(environment / "index").chunks[item["chunks"][0]]
            assert item["answers"][0] in chunk.content
    report = json.loads((environment / "set.jsonl.report.json").read_text())
    assert report["accepted"] == len(items) and report["by_kind"] and report["questions_tried"] == int(tried)
    for reason, n in report["rejected_by_reason"].items():  # a reason a line, its count beside it (a wrap parted them)
        assert re.search(rf"(?m)^ +(rejected +)?{n} {reason.replace('_', ' ')} *$", said.out), said.out
    for strategy in ("plain", "sparse_only"):
        assert main(["eval", "--features", strategy, "--testset", "set.jsonl", "--judge-llm", "none", "--quiet", *common]) == 0
    assert main(["report", "runs/plain", "runs/sparse_only", "-o", "report.md"]) == 0
    text = (environment / "report.md").read_text()
    assert "## sparse_only vs plain" in text and "95% interval" in text and "Pareto front" in text
    capsys.readouterr()
    assert main(["report", "runs/plain", "runs/sparse_only"]) == 0  # not a terminal (captured): the same Markdown, printed
    assert capsys.readouterr().out.strip() == text.strip()

    # the user's own labelled questions (CSV, with the file each is about): does the generated set rank the strategies alike?
    (environment / "mine.csv").write_text(
        "question,answers,source\n"
        "Who built the Bell Rock Lighthouse?,Robert Stevenson,lighthouse.md\n"
        "How tall is the Bell Rock Lighthouse?,35 metres,lighthouse.md\n"
        "Who designed the Caledonian Canal?,Thomas Telford,canal.md\n"
        "When did the Caledonian Canal open?,1822,canal.md\n")
    capsys.readouterr()
    strategies = ["--strategies", "plain,sparse_only,dense_only", "--quiet"]
    assert main(["agreement", "--testsets", "set.jsonl", "mine.csv", *strategies, "--dry-run", *common]) == 0
    assert "6 runs under runs: " in " ".join(capsys.readouterr().out.split()) and not list((environment / "runs").glob("mine-*"))
    assert main(["agreement", "--testsets", "set.jsonl", "mine.csv", *strategies, "--json", "agreement.json", *common]) == 0
    said = " ".join(capsys.readouterr().out.split())
    figures = json.loads((environment / "agreement.json").read_text())
    [generated] = (environment / "runs").glob("set-*")
    answers = [[r["answer"] for r in map(json.loads, (folder / "rows.jsonl").read_text().splitlines())] for folder in (generated / "plain", environment / "runs" / "plain")]
    assert answers[0] == answers[1]  # plain again on set.jsonl, in its own folder: the same answers, from the LLM-reply cache
    assert main(["agreement", *map(str, (environment / "runs").glob("*-*/*")), "--json", "again.json"]) == 0  # the same runs, read back
    assert json.loads((environment / "again.json").read_text()) == figures
    assert figures["testsets"] == {"first": "mine.csv", "second": "set.jsonl"} and figures["strategies"] == ["dense_only", "plain", "sparse_only"]
    for measure in ("retrieval", "answer"):  # every figure said in words, none of them NaN
        verdict = figures["measures"][measure]["verdict"]
        assert verdict[:1].upper() + verdict[1:] + "." in said
        assert figures["measures"][measure]["n_first"] == 4 or verdict.startswith("no ")


def test_bad_input_gets_one_clear_line(environment, capsys, sample_index_dir):
    empty = environment / "empty"
    empty.mkdir()
    assert main(["testset", "generate", str(empty), "-o", "x.jsonl", "--index-dir", str(environment / "idx"), "--quiet"]) == 2
    assert "holds no supported files" in capsys.readouterr().err  # said before any model loads

    (environment / "set.jsonl").write_text('{"question": "Where was Tesla born?", "answers": ["Smiljan"]}\nnot json\n{"answers": []}\n')
    assert main(["eval", "--features", "nope", "--testset", "set.jsonl", "--index-dir", str(sample_index_dir)]) == 2
    assert "no strategy 'nope'" in capsys.readouterr().err
    assert main(["eval", "--features", "plain", "--testset", "set.jsonl", "--index-dir", str(sample_index_dir), "--dry-run", "--judge-llm", "none"]) == 0
    out = capsys.readouterr().out
    assert "line 2: not JSON" in out and "line 3: no question" in out and "1 of 1 items to ask" in out
    # ragkit tune says the same of its test set (it said nothing of its bad lines)
    assert main(["tune", "--testset", "set.jsonl", "--index-dir", str(sample_index_dir), "--strategies", "nope", "--judge-llm", "none"]) == 2
    said = capsys.readouterr()
    assert "line 2: not JSON" in said.out and "line 3: no question" in said.out and "no strategy 'nope'" in said.err
    assert main(["tune", "--testset", "set.jsonl", "--index-dir", str(sample_index_dir), "--trials", "0"]) == 2
    assert "--trials must be at least 1, not 0" in capsys.readouterr().err
    assert main(["tune", "--testset", "set.jsonl", "--index-dir", str(sample_index_dir), "--strategies", "wide", "--dry-run", "--judge-llm", "none"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "at most 24 strategies (Optuna's TPE over 576 combinations) on the tuning half's" in said and "LLM calls, roughly" in said, said
    assert not (environment / "runs").exists()  # a dry run asks nothing and writes nothing
    # many bad lines: the first 20 named, then how many more
    (environment / "many.jsonl").write_text('{"question": "Where was Tesla born?", "answers": ["Smiljan"]}\n' + "not json\n" * 25)
    assert main(["eval", "--features", "plain", "--testset", "many.jsonl", "--index-dir", str(sample_index_dir), "--dry-run", "--judge-llm", "none"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.count(": not JSON") == 20 and "line 21: not JSON" in out and "skipped 5 more bad lines of many.jsonl" in out, out

    run = environment / "runs" / "plain"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"format": 0, "ragkit_version": "0.0.1"}))
    assert main(["eval", "--features", "plain", "--testset", "set.jsonl", "--index-dir", str(sample_index_dir), "--dry-run"]) == 2
    assert "another ragkit run format" in capsys.readouterr().err
    assert main(["report", str(run)]) == 2
    assert "another ragkit run format" in capsys.readouterr().err


def test_strategies_are_listed_and_added_from_the_command_line(environment, capsys):
    (environment / "mine.yaml").write_text("grading: true\nrerank: true\n")
    assert main(["strategies", "add", "mine", "mine.yaml"]) == 0 and main(["strategies", "add", "mine", "mine.yaml"]) == 0
    assert main(["strategies", "list"]) == 0
    listed = capsys.readouterr().out
    assert "mine@2" in listed and "rerank" in listed and "sparse_only" in listed
    lines = listed.splitlines()
    full = next(i for i, line in enumerate(lines) if line.startswith("full "))
    assert all(len(line) <= 80 for line in lines) and re.match(r"full +builtin +routing, hyde, rerank", lines[full])
    # what does not fit folds under its own column (it folded under the names)
    assert lines[full + 1].startswith(" " * lines[full].index("routing")) and "self_correction" in lines[full + 1], listed
    assert main(["strategies", "add", "plain", "mine.yaml"]) == 2
