"""Evaluation runs: a snapshot folder that resumes without losing or repeating a row, refuses a foreign run,
survives a full disk, and reproduces its answers from the LLM cache with no call."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from haystack.dataclasses import ChatMessage

from ragkit.eval import runs as runs_module
from ragkit.eval.runs import EvalRun, RunMismatch, RunStopped, load_run
from ragkit.eval.strategies import resolve
from ragkit.eval.testset import EvalItem, save_testset
from ragkit.llm.cache import LLMCache
from ragkit.pipeline.engine import AgenticRAG

pytestmark = pytest.mark.integration  # the real embedder over sample_docs; the LLM is a counting double

QUESTIONS = ["Where was Nikola Tesla born?", "Which team won Super Bowl 50?", "What does lru_cache do?", "When did the Yuan dynasty end?",
             "Who founded the Yuan dynasty?", "What is the Rhine?"]


class Counting:
    """A chat generator that names itself for the cache and answers with a citation."""

    def __init__(self):
        self.calls = 0

    def cache_fingerprint(self) -> str:
        return "test:eval-runs"

    def run(self, messages, generation_kwargs=None):
        self.calls += 1
        return {"replies": [ChatMessage.from_assistant(f"Answer about {messages[-1].text[-30:].strip()} [1].")]}


@pytest.fixture
def testset(tmp_path, sample_index):
    first_chunk = next(iter(sample_index.chunks))
    items = [EvalItem(q, ["x"], kind="single", chunks=[first_chunk]) for q in QUESTIONS]
    items.append(EvalItem("Where was Ada Lovelace born?", kind="unanswerable"))
    items.append(EvalItem("What is in the deleted file?", ["y"], kind="single", chunks=["no-such-chunk"]))
    return save_testset(items, tmp_path / "set.jsonl"), items


def open_run(folder, testset, index, llm, strategy="plain"):
    path, items = testset
    return EvalRun.open(folder, resolve(strategy), _config(), path, items, known_chunks=set(index.chunks), chat_generator=llm)


def _config():
    from ragkit.config import ModelConfig, RagConfig

    return RagConfig(models=ModelConfig(llm="qwen2.5-coder-0.5b"))


def rag_for(index, llm):
    return AgenticRAG(resolve("plain").features, config=_config(), index=index, chat_generator=llm)


def test_a_run_records_what_it_measured_and_skips_items_whose_chunks_are_gone(tmp_path, testset, sample_index):
    llm = Counting()
    run = open_run(tmp_path / "runs" / "plain", testset, sample_index, llm)
    assert run.missing_chunks and len(run.items) == len(QUESTIONS) + 1
    assert "1 skipped: their chunks are gone" in run.plan().text() and run.plan().llm_calls == len(run.items)
    summary = run.execute(rag_for(sample_index, llm))
    meta = json.loads((tmp_path / "runs" / "plain" / "run.json").read_text())
    assert meta["strategy"]["name"] == "plain" and meta["testset"]["sha256"] and meta["model_fingerprint"] == "test:eval-runs"
    assert meta["ragkit_version"] and meta["skipped_missing_chunks"] == 1
    assert summary["aggregates"]["rows"] == len(run.items) and summary["aggregates"]["recall@k"]["n"] == len(QUESTIONS)
    assert load_run(tmp_path / "runs" / "plain")["aggregates"] == summary["aggregates"]


def test_a_labelled_question_that_names_only_its_file_is_scored_on_retrieval_at_that_grain(tmp_path, sample_index):
    """A user's own CSV names the file a question is about, not a chunk: its retrieval is measured against that file
    (by its path, or by a name only one file of the index ends in); a file the index lacks is a counted failure."""
    from ragkit.eval.testset import load_testset

    (tmp_path / "mine.csv").write_text("question,answers,source\n"
                                       "Where was Nikola Tesla born?,Smiljan,wikipedia/Nikola_Tesla.md\n"
                                       "Who won Super Bowl 50?,Denver Broncos,Super_Bowl_50.md\n"
                                       "What is the capital of Mars?,Olympus,no_such_file.md\n", encoding="utf-8")
    items, problems = load_testset(tmp_path / "mine.csv")
    assert not problems and [i.source for i in items][:2] == ["wikipedia/Nikola_Tesla.md", "Super_Bowl_50.md"]
    llm = Counting()
    run = EvalRun.open(tmp_path / "runs" / "mine", resolve("plain"), _config(), tmp_path / "mine.csv", items,
                       known_chunks=set(sample_index.chunks), chat_generator=llm)
    summary = run.execute(rag_for(sample_index, llm))
    rows = {r["question"]: r for r in run.rows()}
    tesla, bowl, mars = (rows[i.question] for i in items)
    assert tesla["gold_source"] == "wikipedia/Nikola_Tesla.md" and bowl["gold_source"] == "wikipedia/Super_Bowl_50.md"
    files = {cid: doc.meta["source"] for cid, doc in sample_index.chunks.items()}
    for row in (tesla, bowl):
        first = next(rank for rank, f in enumerate(dict.fromkeys(files[c] for c in row["sources"]), 1) if f == row["gold_source"])
        assert row["mrr"] == round(1 / first, 4) and row["recall@k"] == 1.0  # the hybrid retriever finds these files
    assert mars.get("mrr") is None and {"metric": "retrieval", "reason": "its source 'no_such_file.md' is not one file of this index"} in mars["failures"]
    assert summary["aggregates"]["mrr"] == {"mean": round((tesla["mrr"] + bowl["mrr"]) / 2, 4), "n": 2, "failed": 1}


def test_the_plan_counts_the_calls_of_the_judge_the_run_records(tmp_path, testset, sample_index):
    path, items = testset
    calls = {}
    for task in ("correct", "correct_x_likelihood"):
        run = EvalRun.open(tmp_path / task, resolve("plain"), _config(), path, items, known_chunks=set(sample_index.chunks),
                           judge_model=f"m ({task} task)", chat_generator=Counting())
        calls[task] = run.plan().llm_calls
    answered = len(items) - 1  # one item's chunks are gone
    assert calls == {"correct": 3 * answered, "correct_x_likelihood": 4 * answered}  # the answer, then P(yes) (+ the likelihood), context relevance


def test_the_plan_times_a_judge_call_at_the_judges_measured_seconds(tmp_path, testset, sample_index):
    from ragkit.eval.runs import JUDGE_SECONDS_PER_CALL, SECONDS_PER_CALL

    path, items = testset
    answered = len(items) - 1
    for judge in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        run = EvalRun.open(tmp_path / judge, resolve("plain"), _config(), path, items, known_chunks=set(sample_index.chunks),
                           judge_model=f"{judge} (correct_x_likelihood task)", chat_generator=Counting())
        plan = run.plan()
        # the answers at the answering model's seconds, each judge call (three an answer) at the judge's own
        assert plan.seconds == pytest.approx(answered * SECONDS_PER_CALL["qwen2.5-coder-0.5b"] + 3 * answered * JUDGE_SECONDS_PER_CALL[judge])
    measured = json.loads((Path(__file__).parents[1] / "bench" / "results" / "eval_seconds.json").read_text())["judge_seconds_per_call"]
    assert JUDGE_SECONDS_PER_CALL == measured  # the figures the bench measured, not others


def test_a_half_written_row_is_dropped_and_the_run_resumes_without_repeating_one(tmp_path, testset, sample_index):
    llm = Counting()
    folder = tmp_path / "run"
    run = open_run(folder, testset, sample_index, llm)
    run.items = run.items[:3]
    run.execute(rag_for(sample_index, llm))
    with open(folder / "rows.jsonl", "a") as fh:
        fh.write('{"id": "torn", "answer": "half a ro')  # killed in the middle of a write
    resumed = open_run(folder, testset, sample_index, llm)
    assert len(resumed.done) == 3 and resumed.plan().already_done == 3
    resumed.execute(rag_for(sample_index, llm))
    ids = [json.loads(line)["id"] for line in (folder / "rows.jsonl").read_text().splitlines()]
    assert len(ids) == len(set(ids)) == len(resumed.items) and llm.calls == len(resumed.items)


def test_a_run_folder_of_something_else_is_refused_with_what_differs(tmp_path, testset, sample_index):
    llm = Counting()
    folder = tmp_path / "run"
    open_run(folder, testset, sample_index, llm).execute(rag_for(sample_index, llm))
    with pytest.raises(RunMismatch, match="another strategy"):
        open_run(folder, testset, sample_index, llm, strategy="grading")
    other = save_testset([EvalItem("Another question?", ["z"])], tmp_path / "other.jsonl")
    with pytest.raises(RunMismatch, match="another test set"):
        EvalRun.open(folder, resolve("plain"), _config(), other, [EvalItem("Another question?", ["z"])], chat_generator=llm)
    meta = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({**meta, "format": 99}))
    with pytest.raises(RunMismatch, match="another ragkit run format"):
        open_run(folder, testset, sample_index, llm)


def test_a_full_disk_stops_the_run_and_keeps_every_finished_row(tmp_path, testset, sample_index, monkeypatch):
    llm = Counting()
    folder = tmp_path / "run"
    real_fsync, calls = os.fsync, {"n": 0}

    def fsync(fd):
        calls["n"] += 1
        if calls["n"] > 3:  # run.json, then two rows, then the disk fills
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(runs_module.os, "fsync", fsync)
    with pytest.raises(RunStopped, match="the disk is full: 2 rows are kept"):
        open_run(folder, testset, sample_index, llm).execute(rag_for(sample_index, llm))
    monkeypatch.setattr(runs_module.os, "fsync", real_fsync)
    resumed = open_run(folder, testset, sample_index, llm)
    assert len(resumed.done) >= 2  # the rows before the full disk (the third may have reached the file before its fsync failed)
    resumed.execute(rag_for(sample_index, llm))
    assert len(load_run(folder)["rows"]) == len(resumed.items)


def test_a_rerun_with_the_cache_makes_no_llm_call_and_gives_the_same_rows(tmp_path, testset, sample_index):
    llm, cache = Counting(), LLMCache(tmp_path / "cache.sqlite")
    first = open_run(tmp_path / "a", testset, sample_index, llm)
    first.execute(rag_for(sample_index, llm), cache=cache)
    calls = llm.calls
    second = open_run(tmp_path / "b", testset, sample_index, llm)
    second.execute(rag_for(sample_index, llm), cache=cache)
    assert llm.calls == calls  # not one call more
    strip = lambda row: {k: v for k, v in row.items() if k not in ("seconds", "step_seconds", "judge_seconds", "llm_calls", "cache_hits", "prompt_tokens")}  # noqa: E731
    assert [strip(r) for r in first.rows()] == [strip(r) for r in second.rows()]
    assert sum(r["llm_calls"] for r in second.rows()) == 0 and sum(r["cache_hits"] for r in second.rows()) == sum(r["llm_calls"] for r in first.rows())


@pytest.mark.llm
def test_ragkit_eval_killed_with_kill_9_resumes_to_a_clean_runs_rows(tmp_path, testset, sample_index_dir):
    """A real `ragkit eval` process (the 0.5B) killed mid-run: the rerun finishes it, no row lost or repeated."""
    path, items = testset
    env = {**os.environ, "RAGKIT_LLM": "qwen2.5-coder-0.5b", "RAGKIT_MAX_NEW_TOKENS": "48"}
    command = [str(Path(sys.executable).with_name("ragkit")), "eval", "--features", "plain", "--testset", str(path), "--index-dir", str(sample_index_dir),
               "--judge-llm", "none", "--no-cache", "--quiet", "--runs-dir", str(tmp_path / "runs")]
    clean = subprocess.run([*command, "--name", "clean"], env=env, capture_output=True, text=True, timeout=600)
    assert clean.returncode == 0, clean.stderr[-2000:]
    killed = subprocess.Popen([*command, "--name", "killed"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = tmp_path / "runs" / "killed" / "rows.jsonl"
    deadline = time.monotonic() + 300
    while not (rows.exists() and rows.read_text().count("\n") >= 2) and time.monotonic() < deadline and killed.poll() is None:
        time.sleep(0.2)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    partial = rows.read_text().count("\n")
    assert 2 <= partial < len(items) - 1, partial  # it died mid-run
    again = subprocess.run([*command, "--name", "killed"], env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    # with no LLM cache the resumed process starts from an empty prompt cache where the clean run had the question
    # before it in the cache: the same answers and confidences need a reply that depends on its prompt alone
    answers = lambda name: [(r["id"], r["answer"], r["confidence"]) for r in load_run(tmp_path / "runs" / name)["rows"]]  # noqa: E731
    assert sorted(answers("killed")) == sorted(answers("clean")) and len(answers("killed")) == len(items) - 1


def test_a_judge_whose_reply_does_not_parse_is_a_counted_failure_not_a_score(tmp_path, testset, sample_index):
    from haystack.components.generators.chat import MockChatGenerator

    from ragkit.eval.judge import LocalJudge

    llm = Counting()
    run = open_run(tmp_path / "run", testset, sample_index, llm)
    run.items = run.items[:3]
    from ragkit.pipeline.features import Features

    free = AgenticRAG(Features(answer_mode="free"), config=_config(), index=sample_index, chat_generator=llm)  # answers, not declines, to judge
    summary = run.execute(free, judge=LocalJudge(MockChatGenerator(responses=["banana"])))
    agg = summary["aggregates"]
    assert agg["faithfulness"] == {"mean": None, "n": 0, "failed": 3} and agg["context_relevance"] == {"mean": None, "n": 0, "failed": 3}
    reasons = [f["reason"] for r in run.rows() for f in r["failures"]]
    assert all(reason.startswith("judge:") for reason in reasons) and "parse_failed" in " ".join(reasons)
    assert agg["f1"]["n"] == 3  # the rest of each row is scored
    assert all(r["judge_seconds"] >= 0 for r in run.rows())  # a failed judge took time too


def test_a_resumed_run_plans_the_rest_at_its_own_pace(tmp_path, testset, sample_index):
    path, items = testset
    run = EvalRun.open(tmp_path / "run", resolve("plain"), _config(), path, items, known_chunks=set(sample_index.chunks),
                       judge_model="qwen2.5-coder-1.5b (correct task)", chat_generator=Counting())
    left = len(run.items)
    first = run.plan()
    assert first.paced_on == 0 and "on 2 cores" in first.text()  # nothing asked yet: the measured seconds per call
    asked = run.items[:3]
    run.done = {it.id: {"id": it.id, "seconds": 4.0, "judge_seconds": 26.0} for it in asked[:2]}
    assert run.plan().seconds == pytest.approx(first.seconds * (left - 2) / left)  # two rows are too few to go by
    run.done[asked[2].id] = {"id": asked[2].id, "seconds": 6.0}  # declined: no judge
    plan = run.plan()
    assert plan.paced_on == 3 and plan.seconds == pytest.approx((4 + 26 + 4 + 26 + 6) / 3 * (left - 3))
    assert f"roughly {runs_module.duration_text(plan.seconds)} at this run's pace so far (3 questions)" in plan.text()
    for row in run.done.values():  # rows written before the judge's seconds were kept: the seconds per call again
        row.pop("judge_seconds", None)
    assert run.plan().paced_on == 0


def test_tune_chooses_on_one_half_and_reports_on_the_other(tmp_path, testset, sample_index):
    from ragkit.eval.tune import builtin_space, split_halves, tune

    path, items = testset
    tuning, reporting = split_halves(items)
    assert not {i.id for i in tuning} & {i.id for i in reporting} and len(tuning) + len(reporting) == len(items)
    assert split_halves(items) == (tuning, reporting)  # seeded: the same halves every time
    llm = Counting()
    heard = []
    report = tune(lambda f: AgenticRAG(f, config=_config(), index=sample_index, chat_generator=llm), items, builtin_space(["plain", "sparse_only", "dense_only"]),
                  latency_budget=60.0, runs_dir=tmp_path / "tune", testset_path=path, config=_config(), quality="mrr", known_chunks=set(sample_index.chunks),
                  progress=lambda what, done, total: heard.append((what, done, total)))
    assert report["chosen"] in ("plain", "sparse_only", "dense_only") and report["halves"] == {"tuning": len(tuning), "reporting": len(reporting)}
    assert set(report["tuning_half"]) == {"plain", "sparse_only", "dense_only"} and report["pareto_front"]
    measured = len([i for i in tuning if i.chunks and "no-such-chunk" not in i.chunks])  # MRR needs a chunk, and one still in the index
    assert all(e["n"] == measured and e["failed"] == 0 and e["within_budget"] for e in report["tuning_half"].values()), report["tuning_half"]
    # a bar a run: each run heard from at its start and after every question
    asked = len([i for i in tuning if "no-such-chunk" not in i.chunks])  # an item whose chunk is gone is not asked
    assert heard[0] == ("tune half: plain", 0, asked) and ("tune half: dense_only", asked, asked) in heard
    assert [w for w, d, _ in heard if d == 0] == ["tune half: plain", "tune half: sparse_only", "tune half: dense_only", "report half: plain"] + \
        ([f"report half: {report['chosen']}"] if report["chosen"] != "plain" else [])
    assert report["report_half"]["questions_in_both"] == len([i for i in reporting if "no-such-chunk" not in i.chunks])
    with pytest.raises(ValueError, match="no strategy kept p50 latency within"):
        tune(lambda f: AgenticRAG(f, config=_config(), index=sample_index, chat_generator=llm), items, builtin_space(["plain"]),
             latency_budget=0.0, runs_dir=tmp_path / "tune2", testset_path=path, config=_config(), known_chunks=set(sample_index.chunks))


def test_a_space_larger_than_the_trials_is_searched_by_optuna_and_a_small_one_run_whole(tmp_path, testset, sample_index):
    from ragkit.eval.tune import WIDE, tune

    path, items = testset
    llm = Counting()

    def tuned(space, trials, folder):
        return tune(lambda f: AgenticRAG(f, config=_config(), index=sample_index, chat_generator=llm), items, space, latency_budget=60.0,
                    runs_dir=tmp_path / folder, testset_path=path, config=_config(), quality="mrr", known_chunks=set(sample_index.chunks), trials=trials)

    report = tuned(WIDE, 5, "wide")
    assert report["search"] == {"method": "optuna TPE", "space_size": 576, "trials": 5, "seed": 0, "strategies_run": len(report["tuning_half"])}
    assert 1 <= len(report["tuning_half"]) <= 5 and report["chosen"] in report["tuning_half"]  # a repeated trial reuses its run
    assert len([p for p in (tmp_path / "wide").iterdir() if p.name.startswith("tune-")]) == len(report["tuning_half"])
    calls = llm.calls
    again = tuned(WIDE, 5, "wide")  # seeded: the same trials, their run folders reused
    assert list(again["tuning_half"]) == list(report["tuning_half"]) and again["chosen"] == report["chosen"]
    small = tuned({"hyde": (False, True), "top_k": (3, 5)}, 5, "small")
    assert small["search"]["method"] == "exhaustive" and set(small["tuning_half"]) == {"plain", "top_k=3", "hyde", "hyde+top_k=3"}
    assert calls > 0


def test_tune_dry_run_counts_what_tune_then_asks(tmp_path, testset, sample_index):
    """The plan, before anything runs, against the LLM calls the tuning then made (one answer a question here)."""
    from ragkit.eval.tune import WIDE, builtin_space, plan_text, tune, tune_plan

    path, items = testset
    strategies = builtin_space(["plain", "sparse_only", "dense_only"])
    plan = tune_plan(strategies, items, "qwen2.5-coder-0.5b", known_chunks=set(sample_index.chunks))
    assert not (tmp_path / "tune").exists()  # nothing written, nothing asked
    llm = Counting()
    tune(lambda f: AgenticRAG(f, config=_config(), index=sample_index, chat_generator=llm), items, strategies, latency_budget=60.0,
         runs_dir=tmp_path / "tune", testset_path=path, config=_config(), known_chunks=set(sample_index.chunks))
    assert plan["method"] == "exhaustive" and plan["strategies"] == 3 and plan["llm_calls"] == llm.calls, (plan, llm.calls)
    assert plan["tuning_questions"] + plan["reporting_questions"] == len(items) - 1  # the item whose chunk is gone is not asked
    judged = tune_plan(strategies, items, "qwen2.5-coder-0.5b", judge="qwen2.5-coder-1.5b (correct_x_likelihood task)", known_chunks=set(sample_index.chunks))
    assert judged["llm_calls"] == plan["llm_calls"] + 3 * (3 * plan["tuning_questions"] + 2 * plan["reporting_questions"])
    assert judged["seconds"] > plan["seconds"]
    searched = tune_plan(WIDE, items, "qwen2.5-coder-0.5b", trials=24)
    assert searched["method"] == "optuna TPE" and searched["strategies"] == 24 and searched["space_size"] == 576
    assert "at most 24 strategies (Optuna's TPE over 576 combinations)" in plan_text(searched)


def test_one_time_work_is_done_before_the_first_row_is_timed(tmp_path, testset, sample_index):
    # the reranker's sentence vectors of the whole index were the first row's 'sentence_vectors' step (15.9 s
    # of a 19.6 s row on 279 chunks of docs): the run's p95 and mean seconds measured the setup, not questions
    llm = Counting()
    run = open_run(tmp_path / "runs" / "rerank", testset, sample_index, llm, strategy="rerank")
    rag = AgenticRAG(resolve("rerank").features, config=_config(), index=sample_index, chat_generator=llm)
    run.execute(rag)
    assert not any("sentence_vectors" in row["step_seconds"] for row in run.rows())
    assert rag._sentence_vectors_ready and isinstance(run.setup_seconds, dict)
    resumed = open_run(tmp_path / "runs" / "rerank", testset, sample_index, llm, strategy="rerank")
    resumed.execute(rag)  # nothing left to ask: nothing prepared
    assert resumed.setup_seconds == {}
